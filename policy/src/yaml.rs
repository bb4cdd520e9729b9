//! A small YAML node tree with positions, built from yaml-rust2's events.
//!
//! yaml-rust2 does the YAML parsing; this module only keeps what the policy
//! schema needs (scalars, lists, mappings, each with its start position) and
//! refuses YAML features a policy file has no use for (anchors, aliases,
//! tags, several documents), so the schema walker never meets them. Keys are
//! kept in order with duplicates, so the walker can report every duplicate.

use crate::error::Location;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Deeper nesting is refused before it can exhaust the stack (the schema is
/// about eight levels deep).
pub(crate) const MAX_DEPTH: usize = 64;

#[derive(Debug)]
pub(crate) struct Scalar {
    pub value: String,
    /// Unquoted; only plain scalars can be null.
    pub plain: bool,
    pub loc: Location,
}

impl Scalar {
    pub fn is_null(&self) -> bool {
        self.plain && matches!(self.value.as_str(), "" | "~" | "null" | "Null" | "NULL")
    }
}

#[derive(Debug)]
pub(crate) struct Seq {
    pub items: Vec<Node>,
    pub loc: Location,
}

#[derive(Debug)]
pub(crate) struct Map {
    /// In file order, duplicates included.
    pub entries: Vec<(Scalar, Node)>,
    pub loc: Location,
}

impl Map {
    /// The first entry with this key.
    pub fn get(&self, key: &str) -> Option<(&Scalar, &Node)> {
        self.entries
            .iter()
            .find(|(k, _)| k.value == key)
            .map(|(k, v)| (k, v))
    }
}

#[derive(Debug)]
pub(crate) enum Node {
    Scalar(Scalar),
    Seq(Seq),
    Map(Map),
}

impl Node {
    pub fn loc(&self) -> Location {
        match self {
            Node::Scalar(s) => s.loc,
            Node::Seq(s) => s.loc,
            Node::Map(m) => m.loc,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Node::Scalar(s) if s.is_null())
    }

    /// For messages like "expected a list, found a mapping".
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Scalar(s) if s.is_null() => "nothing (null)",
            Node::Scalar(_) => "a scalar",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

fn loc(m: &Marker) -> Location {
    // yaml-rust2 counts lines from 1 and columns from 0.
    Location {
        line: m.line().max(1),
        column: m.col() + 1,
    }
}

enum Frame {
    Seq(Seq),
    Map(Map, Option<Scalar>),
}

/// Parses one YAML document. Errors carry the place and a message.
pub(crate) fn parse(text: &str) -> Result<Node, (Location, String)> {
    // A byte-order mark is not content; yaml-rust2 would make it part of the
    // first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    loop {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| (loc(e.marker()), format!("YAML syntax error: {}", e.info())))?;
        let at = loc(&mark);
        let done = match event {
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err((at, "a policy file holds exactly one YAML document".into()));
                }
                None
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => None,
            Event::Alias(_) => {
                return Err((at, "YAML aliases are not supported in policy files".into()));
            }
            Event::Scalar(value, style, anchor, tag) => {
                refuse_anchor_tag(anchor, tag.is_some(), at)?;
                Some(Node::Scalar(Scalar {
                    value,
                    plain: style == TScalarStyle::Plain,
                    loc: at,
                }))
            }
            Event::SequenceStart(anchor, tag) => {
                refuse_anchor_tag(anchor, tag.is_some(), at)?;
                push(
                    &mut stack,
                    Frame::Seq(Seq {
                        items: Vec::new(),
                        loc: at,
                    }),
                    at,
                )?;
                None
            }
            Event::MappingStart(anchor, tag) => {
                refuse_anchor_tag(anchor, tag.is_some(), at)?;
                push(
                    &mut stack,
                    Frame::Map(
                        Map {
                            entries: Vec::new(),
                            loc: at,
                        },
                        None,
                    ),
                    at,
                )?;
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(s)) => Some(Node::Seq(s)),
                _ => return Err((at, "unbalanced YAML sequence".into())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(m, None)) => Some(Node::Map(m)),
                _ => return Err((at, "unbalanced YAML mapping".into())),
            },
        };
        if let Some(node) = done {
            attach(&mut stack, &mut root, node)?;
        }
    }
    // An empty file is an empty mapping; the schema then says what is missing.
    Ok(root.unwrap_or(Node::Map(Map {
        entries: Vec::new(),
        loc: Location::START,
    })))
}

fn refuse_anchor_tag(anchor: usize, tagged: bool, at: Location) -> Result<(), (Location, String)> {
    if anchor != 0 {
        return Err((at, "YAML anchors are not supported in policy files".into()));
    }
    if tagged {
        return Err((at, "YAML tags are not supported in policy files".into()));
    }
    Ok(())
}

fn push(stack: &mut Vec<Frame>, frame: Frame, at: Location) -> Result<(), (Location, String)> {
    if stack.len() >= MAX_DEPTH {
        return Err((at, format!("nesting deeper than {MAX_DEPTH} levels")));
    }
    stack.push(frame);
    Ok(())
}

fn attach(
    stack: &mut [Frame],
    root: &mut Option<Node>,
    node: Node,
) -> Result<(), (Location, String)> {
    match stack.last_mut() {
        None => {
            *root = Some(node);
        }
        Some(Frame::Seq(seq)) => {
            // Block sequences report the position of their first item; a
            // flow sequence's '[' comes first anyway.
            if seq.items.is_empty() && node.loc() < seq.loc {
                seq.loc = node.loc();
            }
            seq.items.push(node);
        }
        Some(Frame::Map(map, pending)) => match pending.take() {
            None => match node {
                Node::Scalar(key) => {
                    // Block mappings report the position after their first
                    // key; the key itself is where a reader looks.
                    if map.entries.is_empty() && key.loc < map.loc {
                        map.loc = key.loc;
                    }
                    *pending = Some(key);
                }
                other => {
                    return Err((other.loc(), "mapping keys must be plain scalars".into()));
                }
            },
            Some(key) => map.entries.push((key, node)),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> Location {
        Location { line, column }
    }

    #[test]
    fn positions_are_one_based() {
        let n = parse("a:\n  b: [x, 'y']\n  c:\n    - 1\n").unwrap();
        let Node::Map(m) = n else { panic!() };
        assert_eq!(m.loc, at(1, 1));
        let (_, a) = m.get("a").unwrap();
        let Node::Map(a) = a else { panic!() };
        assert_eq!(a.loc, at(2, 3));
        let (bk, b) = a.get("b").unwrap();
        assert_eq!(bk.loc, at(2, 3));
        let Node::Seq(b) = b else { panic!() };
        assert_eq!(b.loc, at(2, 6));
        assert_eq!(b.items[1].loc(), at(2, 10));
        let Node::Seq(c) = a.get("c").unwrap().1 else {
            panic!()
        };
        assert_eq!(c.items[0].loc(), at(4, 7));
    }

    #[test]
    fn keeps_duplicate_keys() {
        let Node::Map(m) = parse("a: 1\na: 2\n").unwrap() else {
            panic!()
        };
        assert_eq!(m.entries.len(), 2);
    }

    #[test]
    fn refuses_what_policies_do_not_use() {
        for (text, msg) in [
            ("a: &x 1\nb: *x\n", "anchors"),
            ("a: *x\n", "YAML syntax error"),
            ("a: !!str x\n", "tags"),
            ("a: 1\n---\nb: 2\n", "one YAML document"),
            ("? [a]\n: b\n", "plain scalars"),
            ("a: [1,\n", "YAML syntax error"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.1.contains(msg), "{text:?}: {err:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = format!("a:\n{}x\n", "- ".repeat(100_000));
        let err = parse(&text).unwrap_err();
        assert!(err.1.contains("nesting"), "{err:?}");
        let text = format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(&text).is_err());
    }

    #[test]
    fn empty_and_bom() {
        assert!(matches!(parse("").unwrap(), Node::Map(m) if m.entries.is_empty()));
        let Node::Map(m) = parse("\u{feff}a: 1\n").unwrap() else {
            panic!()
        };
        assert!(m.get("a").is_some());
    }

    #[test]
    fn nulls() {
        let Node::Map(m) = parse("a:\nb: ~\nc: null\nd: ''\n").unwrap() else {
            panic!()
        };
        assert!(m.get("a").unwrap().1.is_null());
        assert!(m.get("b").unwrap().1.is_null());
        assert!(m.get("c").unwrap().1.is_null());
        assert!(!m.get("d").unwrap().1.is_null());
    }
}
