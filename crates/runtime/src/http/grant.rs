//! Which origins a plugin may call: the manifest's `[capabilities] http` list.
//!
//! A pattern is `SCHEME://HOST[:PORT]`: scheme `http` or `https`; a host name, an IP literal
//! (IPv6 in brackets), or `*.` before a name for any name under it; a port, `*` for any, or
//! none for the scheme's default. Nothing else: no path, no user, no `*` inside a label. A
//! request is allowed when its scheme, host and port match one pattern; names compare without
//! case and without a final dot.
//!
//! A grant is of a name, not of what the name resolves to: where the addresses behind an
//! allowed name may lead is [`super::address`]'s question, and only a pattern that names an IP
//! literally lets a request reach an address those rules keep out.

use std::fmt;
use std::net::IpAddr;

/// The origins one plugin may call; empty (nothing) by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpGrant {
    rules: Vec<Rule>,
}

/// One pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    https: bool,
    host: Host,
    /// `None` is `*`.
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    /// A name, lower case, without a final dot.
    Name(String),
    /// `*.SUFFIX`: any name ending in `.SUFFIX` (one label or more before it).
    Under(String),
    /// An address, written literally.
    Ip(IpAddr),
}

/// Where a request goes, as the grant sees it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub https: bool,
    pub host: &'a str,
    pub port: u16,
}

impl HttpGrant {
    /// Parses the manifest's patterns; the error names the bad one and says why.
    pub fn parse(patterns: &[String]) -> Result<Self, String> {
        let rules = patterns
            .iter()
            .map(|p| Rule::parse(p).map_err(|why| format!("`{p}`: {why}")))
            .collect::<Result<_, _>>()?;
        Ok(HttpGrant { rules })
    }

    /// Whether a request to `target` is allowed.
    pub fn allows(&self, target: Target<'_>) -> bool {
        let host = normalise(target.host);
        let ip = parse_ip(&host);
        self.rules.iter().any(|r| r.matches(target, &host, ip))
    }

    /// Whether a pattern that matches `target` names `ip` literally: only then may a request
    /// reach an address the address rules keep out (loopback, private, link-local).
    pub fn names_address(&self, target: Target<'_>, ip: IpAddr) -> bool {
        let host = normalise(target.host);
        self.rules.iter().any(|r| {
            r.https == target.https
                && r.port.is_none_or(|p| p == target.port)
                && r.host == Host::Ip(ip)
                && parse_ip(&host) == Some(ip)
        })
    }
}

impl Rule {
    fn parse(pattern: &str) -> Result<Rule, &'static str> {
        let (scheme, rest) = pattern
            .split_once("://")
            .ok_or("a pattern is SCHEME://HOST[:PORT]")?;
        let https = match scheme {
            "https" => true,
            "http" => false,
            _ => return Err("the scheme must be http or https"),
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err("a pattern has no path, query or user: SCHEME://HOST[:PORT]");
        }
        let (host, port) = split_port(rest)?;
        let port = match port {
            None => Some(if https { 443 } else { 80 }),
            Some("*") => None,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p != 0 => Some(p),
                _ => return Err("the port must be 1-65535 or *"),
            },
        };
        Ok(Rule {
            https,
            host: Host::parse(host)?,
            port,
        })
    }

    fn matches(&self, target: Target<'_>, host: &str, ip: Option<IpAddr>) -> bool {
        if self.https != target.https || self.port.is_some_and(|p| p != target.port) {
            return false;
        }
        match &self.host {
            Host::Name(name) => ip.is_none() && host == name,
            Host::Under(suffix) => {
                ip.is_none()
                    && host
                        .strip_suffix(suffix.as_str())
                        .and_then(|head| head.strip_suffix('.'))
                        .is_some_and(|head| !head.is_empty())
            }
            Host::Ip(granted) => ip == Some(*granted),
        }
    }
}

impl Host {
    fn parse(host: &str) -> Result<Host, &'static str> {
        if let Some(ip) = parse_ip(host) {
            return Ok(Host::Ip(ip));
        }
        let host = normalise(host);
        let (wild, name) = match host.strip_prefix("*.") {
            Some(name) => (true, name),
            None => (false, host.as_str()),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if name.is_empty() || !name.split('.').all(label_ok) {
            return Err("the host must be a name, an IP address, or *. before a name");
        }
        Ok(if wild {
            Host::Under(name.to_string())
        } else {
            Host::Name(name.to_string())
        })
    }
}

/// `HOST[:PORT]` → host and port text; an IPv6 host is in brackets.
fn split_port(rest: &str) -> Result<(&str, Option<&str>), &'static str> {
    if let Some(after) = rest.strip_prefix('[') {
        let (ip, tail) = after.split_once(']').ok_or("an IPv6 address needs its ]")?;
        return match tail {
            "" => Ok((ip, None)),
            _ => tail
                .strip_prefix(':')
                .map(|p| (ip, Some(p)))
                .ok_or("after ] comes :PORT or nothing"),
        };
    }
    Ok(match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    })
}

fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// An IP literal as a URI writes it (IPv6 with or without brackets).
fn parse_ip(host: &str) -> Option<IpAddr> {
    unbracketed(host).parse().ok()
}

/// A URI's host without the brackets around an IPv6 literal: what DNS, an address parse and a
/// TLS server name take.
pub(super) fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(patterns: &[&str]) -> HttpGrant {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        HttpGrant::parse(&patterns).expect("patterns parse")
    }

    fn target(https: bool, host: &str, port: u16) -> Target<'_> {
        Target { https, host, port }
    }

    #[test]
    fn scheme_host_and_port_must_all_match() {
        let g = grant(&[
            "https://api.sendgrid.com",
            "https://*.example.com:8443",
            "http://127.0.0.1:*",
        ]);
        assert!(g.allows(target(true, "api.sendgrid.com", 443)));
        assert!(g.allows(target(true, "API.SendGrid.com.", 443)));
        assert!(!g.allows(target(false, "api.sendgrid.com", 443)));
        assert!(!g.allows(target(true, "api.sendgrid.com", 8443)));
        assert!(!g.allows(target(true, "evil.api.sendgrid.com", 443)));
        assert!(!g.allows(target(true, "api.sendgrid.com.evil.net", 443)));
        assert!(g.allows(target(true, "a.example.com", 8443)));
        assert!(g.allows(target(true, "a.b.example.com", 8443)));
        assert!(!g.allows(target(true, "example.com", 8443)));
        assert!(!g.allows(target(true, "aexample.com", 8443)));
        assert!(!g.allows(target(true, "a.example.com", 443)));
        assert!(g.allows(target(false, "127.0.0.1", 1)));
        assert!(g.allows(target(false, "127.0.0.1", 65535)));
        assert!(!g.allows(target(false, "127.0.0.2", 80)));
        assert!(!g.allows(target(false, "localhost", 80)));
    }

    #[test]
    fn a_name_pattern_never_matches_an_address_and_the_reverse() {
        let g = grant(&["http://*.0.0.1", "https://[::1]:8443"]);
        assert!(!g.allows(target(false, "127.0.0.1", 80)));
        assert!(g.allows(target(true, "[::1]", 8443)));
        assert!(g.allows(target(true, "::1", 8443)));
        assert!(!g.allows(target(true, "[::2]", 8443)));
    }

    #[test]
    fn only_a_literal_pattern_names_an_address() {
        let g = grant(&["http://127.0.0.1:*", "http://localhost:*"]);
        let lo = IpAddr::from([127, 0, 0, 1]);
        assert!(g.names_address(target(false, "127.0.0.1", 9000), lo));
        // A name that resolves to loopback is not a literal grant of loopback.
        assert!(!g.names_address(target(false, "localhost", 9000), lo));
        assert!(!g.names_address(target(true, "127.0.0.1", 9000), lo));
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let g = HttpGrant::default();
        assert!(!g.allows(target(true, "api.sendgrid.com", 443)));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        for (bad, why) in [
            ("api.sendgrid.com", "SCHEME://HOST"),
            ("ftp://a.com", "http or https"),
            ("https://a.com/v3", "no path"),
            ("https://user@a.com", "no path"),
            ("https://a.com:0", "1-65535"),
            ("https://a.com:99999", "1-65535"),
            ("https://a*.com", "the host must be"),
            ("https://*", "the host must be"),
            ("https://a.*.com", "the host must be"),
            ("https://[::1", "]"),
            ("https://", "the host must be"),
        ] {
            let err = HttpGrant::parse(&[bad.to_string()]).expect_err(bad);
            assert!(err.contains(bad) && err.contains(why), "{bad}: {err}");
        }
    }
}
