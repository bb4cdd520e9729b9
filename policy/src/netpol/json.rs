//! Reading the API's JSON with a path: every value is visited as an [`At`],
//! which knows where it is (`spec.ingress[0].from[1].ipBlock.cidr`), so a
//! malformed field is reported by its path rather than by serde's line and
//! column in a document the operator never saw.
//!
//! Absent and `null` fields read alike, as Go's decoder reads them into
//! the API types (a nil pointer or slice); unknown fields are ignored.

use serde_json::{Map, Value};
use std::fmt;

/// The kind of object an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    NetworkPolicy,
    Namespace,
    Pod,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::Namespace => "Namespace",
            Kind::Pod => "Pod",
        })
    }
}

/// A malformed object or field, named by the object (`team/allow-db`, or
/// `team` for a namespace) and the field's path.
///
/// Displays as `NetworkPolicy team/allow-db: spec.ingress[0].ports[1].port:
/// expected 1..=65535, found 0`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NetpolError {
    pub kind: Kind,
    /// `namespace/name` (a namespace: its name); `?` when the object's
    /// metadata could not be read.
    pub object: String,
    /// The field's path from the object's top; empty for the object as a
    /// whole (not JSON, not an object).
    pub path: String,
    pub message: String,
}

impl fmt::Display for NetpolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: ", self.kind, self.object)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for NetpolError {}

/// A field's problem before the object's name is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fail {
    pub path: String,
    pub message: String,
}

impl Fail {
    pub fn into_error(self, kind: Kind, object: &str) -> NetpolError {
        NetpolError {
            kind,
            object: object.to_string(),
            path: self.path,
            message: self.message,
        }
    }
}

/// A JSON value and its path (paths are written as they are read: objects
/// are parsed once, when they change, never on a decision's path).
#[derive(Clone)]
pub(crate) struct At<'a> {
    pub value: &'a Value,
    path: String,
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl<'a> At<'a> {
    pub fn root(value: &'a Value) -> At<'a> {
        At {
            value,
            path: String::new(),
        }
    }

    fn child(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    pub fn fail(&self, message: impl Into<String>) -> Fail {
        Fail {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    fn expected(&self, what: &str) -> Fail {
        self.fail(format!("expected {what}, found {}", kind_of(self.value)))
    }

    pub fn object(&self) -> Result<&'a Map<String, Value>, Fail> {
        self.value
            .as_object()
            .ok_or_else(|| self.expected("an object"))
    }

    /// A field of this object, `None` when absent or null; an error when
    /// this value is not an object.
    pub fn field(&self, name: &str) -> Result<Option<At<'a>>, Fail> {
        match self.object()?.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => Ok(Some(At {
                value,
                path: self.child(name),
            })),
        }
    }

    /// A field that must be present (and not null).
    pub fn required(&self, name: &str) -> Result<At<'a>, Fail> {
        self.field(name)?.ok_or_else(|| Fail {
            path: self.child(name),
            message: "missing".into(),
        })
    }

    pub fn str(&self) -> Result<&'a str, Fail> {
        self.value.as_str().ok_or_else(|| self.expected("a string"))
    }

    /// A non-empty string (object names, selector keys).
    pub fn name(&self) -> Result<&'a str, Fail> {
        match self.str()? {
            "" => Err(self.fail("must not be empty")),
            s => Ok(s),
        }
    }

    /// An integer in `lo..=hi`.
    pub fn int_in(&self, lo: u64, hi: u64) -> Result<u64, Fail> {
        let range = format!("an integer in {lo}..={hi}");
        match self.value.as_u64() {
            Some(n) if (lo..=hi).contains(&n) => Ok(n),
            // Out of range, negative or not whole: say which number.
            _ if self.value.is_number() => {
                Err(self.fail(format!("expected {range}, found {}", self.value)))
            }
            _ => Err(self.expected(&range)),
        }
    }

    /// The items of a list, each with its index in the path.
    pub fn items(&self) -> Result<Vec<At<'a>>, Fail> {
        let list = self
            .value
            .as_array()
            .ok_or_else(|| self.expected("a list"))?;
        Ok(list
            .iter()
            .enumerate()
            .map(|(i, value)| At {
                value,
                path: format!("{}[{i}]", self.path),
            })
            .collect())
    }

    /// The items of an optional list field (absent and null: none).
    pub fn list(&self, name: &str) -> Result<Vec<At<'a>>, Fail> {
        match self.field(name)? {
            None => Ok(Vec::new()),
            Some(at) => at.items(),
        }
    }

    /// Whether an optional list field is absent, null or empty.
    pub fn list_is_empty(&self, name: &str) -> Result<bool, Fail> {
        Ok(self.list(name)?.is_empty())
    }
}
