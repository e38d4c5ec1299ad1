//! Which addresses a request may reach once its name is resolved.
//!
//! A grant names hosts, but DNS decides where a name leads, and whoever controls a granted
//! name's records (or a message that steers a handler to a URL) could point it at the host's
//! own network: its loopback services, the private network around it, or the cloud metadata
//! endpoint (169.254.169.254, and fd00:ec2::254 on IPv6) that hands out the host's credentials.
//! So every resolved address is checked before a connection is made, and the connection goes
//! to the checked address (never to a second lookup of the name). Addresses in the ranges
//! below are refused unless the grant names that address literally (`http://127.0.0.1:*`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is kept out, or `None` for an address on the public internet.
pub(super) fn restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => restricted_v4(v4),
            None => restricted_v6(v6),
        },
    }
}

fn restricted_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        () if ip == Ipv4Addr::new(169, 254, 169, 254) => "the cloud metadata endpoint",
        () if ip.is_unspecified() || a == 0 => "unspecified",
        () if ip.is_loopback() => "loopback",
        () if ip.is_private() => "private",
        () if ip.is_link_local() => "link-local",
        () if a == 100 && (64..128).contains(&b) => "shared (carrier-grade NAT)",
        () if ip.is_broadcast() || ip.is_multicast() || a >= 240 => "not unicast",
        () if a == 192 && b == 0 && ip.octets()[2] == 0 => "reserved (IETF protocol assignments)",
        () => return None,
    })
}

fn restricted_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match () {
        () if ip.is_unspecified() => "unspecified",
        () if ip.is_loopback() => "loopback",
        () if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => {
            "the cloud metadata endpoint"
        }
        () if first & 0xfe00 == 0xfc00 => "private (unique local)",
        () if first & 0xffc0 == 0xfe80 => "link-local",
        () if first & 0xffc0 == 0xfec0 => "site-local",
        () if ip.is_multicast() => "not unicast",
        // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96) forms carry an IPv4 address
        // that is judged as one.
        () if ip.segments()[..6] == [0; 6] || ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            return restricted_v4(embedded_v4(ip));
        }
        () => return None,
    })
}

/// The IPv4 address in an address's last 32 bits.
fn embedded_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let o = ip.octets();
    Ipv4Addr::new(o[12], o[13], o[14], o[15])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(ip: &str) -> Option<&'static str> {
        restricted(ip.parse().expect("an address"))
    }

    #[test]
    fn the_host_s_own_networks_are_kept_out() {
        for (ip, reason) in [
            ("169.254.169.254", "the cloud metadata endpoint"),
            ("fd00:ec2::254", "the cloud metadata endpoint"),
            ("::ffff:169.254.169.254", "the cloud metadata endpoint"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.254", "private"),
            ("192.168.1.1", "private"),
            ("fd12:3456::1", "private (unique local)"),
            ("169.254.0.1", "link-local"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("255.255.255.255", "not unicast"),
            ("224.0.0.1", "not unicast"),
            ("ff02::1", "not unicast"),
            ("240.0.0.1", "not unicast"),
            ("192.0.0.170", "reserved (IETF protocol assignments)"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "the cloud metadata endpoint"),
            ("64:ff9b::10.0.0.1", "private"),
        ] {
            assert_eq!(why(ip), Some(reason), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:2800:220:1:248:1893:25c8:1946",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(why(ip), None, "{ip}");
        }
    }
}
