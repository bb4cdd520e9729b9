//! The walker and what every section of the schema uses: reporting,
//! checked mappings and their keys, named entries, scalars.

use super::Document;
use crate::error::{Errors, Location};
use crate::yaml::{Map, Node, Scalar};
use std::collections::HashMap;

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Tenant, group and endpoint-like names appear in rule names
/// (`tenant/group/ingress[0]`) and nftables comments, so they are kept to a
/// quoting-free alphabet.
pub(crate) fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && s.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub(super) const NAME_RULE: &str =
    "expected 1..=64 letters, digits, '-', '_' or '.', starting with a letter or digit";

/// Edit distance, for "did you mean" hints on misspelt keys.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn list(words: &[&str]) -> String {
    words.join(", ")
}

pub(crate) struct Walker<'e> {
    errs: &'e mut Errors,
}

/// Where to point for a value: an empty plain value has no position of its
/// own (the parser reports the next token), so point at its key.
pub(crate) fn value_loc(node: &Node, key: &Scalar) -> Location {
    match node {
        Node::Scalar(s) if s.plain && s.value.is_empty() => key.loc,
        _ => node.loc(),
    }
}

impl Walker<'_> {
    pub(crate) fn err(&mut self, loc: Location, path: &str, msg: impl Into<String>) {
        self.errs.push(loc, path, msg);
    }

    /// The mapping at `node` (the value of `key`) with keys `allowed`,
    /// checked: None for null (the defaults) and, reported, for anything
    /// but a mapping.
    pub(crate) fn keyed_map<'n>(
        &mut self,
        key: &Scalar,
        node: &'n Node,
        path: &str,
        allowed: &[&str],
    ) -> Option<&'n Map> {
        let map = match node {
            _ if node.is_null() => return None,
            Node::Map(m) => m,
            other => {
                let keys = if allowed.len() == 1 { "key" } else { "keys" };
                self.err(
                    value_loc(other, key),
                    path,
                    format!(
                        "expected a mapping with {keys} {}; found {}",
                        list(allowed),
                        other.kind()
                    ),
                );
                return None;
            }
        };
        self.check_keys(map, path, allowed, None);
        Some(map)
    }

    /// Reports unknown and duplicate keys.
    pub(crate) fn check_keys(
        &mut self,
        map: &Map,
        path: &str,
        allowed: &[&str],
        hint: Option<(&str, &str)>,
    ) {
        // A map, not a scan: a hostile file may have huge mappings.
        let mut seen: HashMap<&str, Location> = HashMap::new();
        for (key, _) in &map.entries {
            if let Some(first) = seen.get(key.value.as_str()) {
                self.err(
                    key.loc,
                    &join(path, &key.value),
                    format!("duplicate key {:?} (first at {first})", key.value),
                );
                continue;
            }
            seen.insert(&key.value, key.loc);
            if allowed.contains(&key.value.as_str()) {
                continue;
            }
            let mut msg = format!(
                "unknown key {:?}: expected one of {}",
                key.value,
                list(allowed)
            );
            match hint {
                Some((wrong, why)) if key.value == wrong => {
                    msg = format!("unknown key {:?}: {why}", key.value);
                }
                _ => {
                    if let Some(best) = allowed
                        .iter()
                        .filter(|a| distance(a, &key.value) <= 2)
                        .min_by_key(|a| distance(a, &key.value))
                    {
                        msg.push_str(&format!(" (did you mean {best:?}?)"));
                    }
                }
            }
            self.err(key.loc, &join(path, &key.value), msg);
        }
    }

    /// Reports duplicate names in a mapping whose keys are names (tenants,
    /// groups); returns the entries to use (first of each name).
    pub(super) fn named_entries<'n>(
        &mut self,
        map: &'n Map,
        path: &str,
        what: &str,
    ) -> Vec<(&'n Scalar, &'n Node)> {
        let mut out: Vec<(&Scalar, &Node)> = Vec::new();
        let mut seen: HashMap<&str, Location> = HashMap::new();
        for (key, value) in &map.entries {
            let p = join(path, &key.value);
            if let Some(first) = seen.get(key.value.as_str()) {
                self.err(
                    key.loc,
                    &p,
                    format!("duplicate {what} name {:?} (first at {first})", key.value),
                );
                continue;
            }
            seen.insert(&key.value, key.loc);
            if !valid_name(&key.value) {
                self.err(
                    key.loc,
                    &p,
                    format!("invalid {what} name {:?}: {NAME_RULE}", key.value),
                );
            }
            out.push((key, value));
        }
        out
    }

    pub(crate) fn scalar<'n>(
        &mut self,
        node: &'n Node,
        key: &Scalar,
        path: &str,
        expected: &str,
    ) -> Option<&'n Scalar> {
        match node {
            Node::Scalar(s) if !s.is_null() => Some(s),
            other => {
                self.err(
                    value_loc(other, key),
                    path,
                    format!("expected {expected}, found {}", other.kind()),
                );
                None
            }
        }
    }
}

/// Walks the YAML tree; the document is meaningful only if `errs` stays
/// empty.
pub(crate) fn walk(root: &Node, errs: &mut Errors) -> Document {
    Walker { errs }.document(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("acme"));
        assert!(valid_name("web-1.a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("-x"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"a".repeat(65)));
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("protocol", "protcol"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("ports", "ports"), 0);
    }
}
