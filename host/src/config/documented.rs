//! The configuration reference (`docs/configuration.md`) names every field that `qhost.toml`
//! and a plugin's manifest accept, in the table that accepts it, so the reference cannot drift
//! from the code.
//!
//! The fields come from serde itself: every table refuses unknown fields, and its error for one
//! lists the fields it accepts. Probing each table with an unknown field, and each field that is
//! itself a table, walks the whole tree. The reference's side is its TOML blocks, read as
//! `(table, key)` pairs, commented-out examples (`# key = …`) included.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;

use super::file::RawConfig;
use crate::plugin::manifest::Manifest;

/// The key no table accepts.
const PROBE: &str = "__probe";

/// A field as `table.key` (`key` at the top level); a table of tables adds its own name.
type Field = String;

/// Every field `T` accepts, as `table.key`.
fn fields<T: DeserializeOwned>() -> BTreeSet<Field> {
    let mut found = BTreeSet::new();
    walk::<T>(&mut Vec::new(), &mut found);
    found
}

/// The fields of the table at `path` (each part a name, `[[…]]` ones marked by `true`).
fn walk<T: DeserializeOwned>(path: &mut Vec<(String, bool)>, found: &mut BTreeSet<Field>) {
    let Some(keys) = accepted::<T>(path, PROBE) else {
        return;
    };
    for key in keys {
        let name = dotted(path, &key);
        found.insert(name);
        for array in [false, true] {
            path.push((key.clone(), array));
            if accepted::<T>(path, PROBE).is_some() {
                walk::<T>(path, found);
                path.pop();
                break;
            }
            path.pop();
        }
    }
}

/// The fields serde says the table at `path` accepts, when it is a table that refuses `probe`.
fn accepted<T: DeserializeOwned>(path: &[(String, bool)], probe: &str) -> Option<Vec<String>> {
    let mut text = String::new();
    for i in 0..path.len() {
        let name = path[..=i].iter().map(|(n, _)| n.as_str());
        let name = name.collect::<Vec<_>>().join(".");
        match path[i].1 {
            true => text.push_str(&format!("[[{name}]]\n")),
            false if i + 1 == path.len() => text.push_str(&format!("[{name}]\n")),
            false => {}
        }
    }
    text.push_str(&format!("{probe} = 1\n"));
    let error = toml::from_str::<T>(&text).err()?.to_string();
    let listed = error.split(&format!("unknown field `{probe}`")).nth(1)?;
    let listed = listed.lines().next().unwrap_or_default();
    Some(
        listed
            .split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect(),
    )
}

fn dotted(path: &[(String, bool)], key: &str) -> Field {
    let mut parts: Vec<&str> = path.iter().map(|(n, _)| n.as_str()).collect();
    parts.push(key);
    parts.join(".")
}

/// What the TOML blocks of `doc` hold: each table named by a header, each key under its
/// table, and each inline table's keys (`api-key = { env = … }` names `config.api-key`).
fn documented(doc: &str) -> BTreeSet<Field> {
    let mut found = BTreeSet::new();
    let mut table = String::new();
    let mut in_toml = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_toml = line.trim() == "```toml";
            table.clear();
            continue;
        }
        if !in_toml {
            continue;
        }
        let text = line.trim_start().trim_start_matches('#').trim_start();
        if let Some(header) = text.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            let Some(end) = header.find(']') else {
                continue;
            };
            table = header[..end].trim().to_string();
            found.insert(table.clone());
            continue;
        }
        let Some((key, _)) = text.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            continue;
        }
        found.insert(match table.as_str() {
            "" => key.to_string(),
            table => format!("{table}.{key}"),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference page, and its two parts: `qhost.toml`, then a plugin's manifest.
    fn reference() -> (String, String) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
        let at = doc
            .find("## Plugin manifest")
            .expect("the reference's manifest section");
        (doc[..at].to_string(), doc[at..].to_string())
    }

    fn missing(accepted: &BTreeSet<Field>, doc: &str) -> Vec<Field> {
        let shown = documented(doc);
        accepted.difference(&shown).cloned().collect()
    }

    #[test]
    fn every_field_of_qhost_toml_is_in_the_reference() {
        let accepted = fields::<RawConfig>();
        assert!(
            accepted.contains("queue.batch-size") && accepted.contains("timeouts.connect-ms"),
            "the probe walks nested tables: {accepted:?}"
        );
        let (host, _) = reference();
        let missing = missing(&accepted, &host);
        assert!(
            missing.is_empty(),
            "docs/configuration.md does not show these qhost.toml fields: {missing:?}"
        );
    }

    #[test]
    fn every_field_of_a_manifest_is_in_the_reference() {
        let accepted = fields::<Manifest>();
        assert!(accepted.contains("limits.timeout-ms"), "{accepted:?}");
        let (_, manifest) = reference();
        let missing = missing(&accepted, &manifest);
        assert!(
            missing.is_empty(),
            "docs/configuration.md does not show these manifest fields: {missing:?}"
        );
    }

    #[test]
    fn a_field_the_reference_lacks_is_found() {
        let doc = "```toml\nplugins-dir = \"p\"\n[source]\n# kind = \"sqs\"\n```\n";
        let shown = documented(doc);
        assert!(
            shown.contains("plugins-dir") && shown.contains("source.kind"),
            "{shown:?}"
        );
        let accepted = fields::<RawConfig>();
        let gaps = missing(&accepted, doc);
        assert!(gaps.contains(&"data-dir".to_string()), "{gaps:?}");
        assert!(!gaps.contains(&"source.kind".to_string()), "{gaps:?}");
    }
}
