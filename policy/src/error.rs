//! Errors that name the offending place in the policy file.

use std::fmt;

/// A 1-based position in the policy file (columns count characters, as
/// editors do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl Location {
    pub const START: Location = Location { line: 1, column: 1 };
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem in a policy file.
///
/// Displays as `file:line:column: path: message`, e.g.
/// `policy.yaml:7:17: tenants.acme.securityGroups.db.ingress[0].from.cidr:
/// invalid CIDR "10.0.0.0/33": prefix length must be 0..=32`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// The file name given to [`crate::Policy::parse`] or the path given to
    /// [`crate::Policy::load`].
    pub file: String,
    /// Where the offending YAML node starts; `None` only when the file
    /// could not be read at all.
    pub location: Option<Location>,
    /// Dotted path of the offending node (`tenants.acme.securityGroups.db`);
    /// empty for errors about the file as a whole (YAML syntax, I/O).
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(loc) = self.location {
            write!(f, ":{loc}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// Every problem found in a policy file (never empty), in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyErrors(Vec<PolicyError>);

impl PolicyErrors {
    pub fn errors(&self) -> &[PolicyError] {
        &self.0
    }

    /// The first error in file order.
    pub fn first(&self) -> &PolicyError {
        // Constructed only by `Errors::finish` with at least one entry.
        &self.0[0]
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, PolicyError> {
        self.0.iter()
    }

    pub fn into_vec(self) -> Vec<PolicyError> {
        self.0
    }

    pub(crate) fn single(err: PolicyError) -> Self {
        PolicyErrors(vec![err])
    }
}

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyErrors {}

impl<'a> IntoIterator for &'a PolicyErrors {
    type Item = &'a PolicyError;
    type IntoIter = std::slice::Iter<'a, PolicyError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Bound on collected errors: a badly broken file should not produce
/// megabytes of output.
const MAX_ERRORS: usize = 200;

/// Collects errors while validating.
pub(crate) struct Errors {
    file: String,
    list: Vec<PolicyError>,
}

impl Errors {
    pub fn new(file: &str) -> Self {
        Errors {
            file: file.to_string(),
            list: Vec::new(),
        }
    }

    pub fn push(&mut self, loc: Location, path: &str, message: impl Into<String>) {
        if self.list.len() < MAX_ERRORS {
            self.list.push(PolicyError {
                file: self.file.clone(),
                location: Some(loc),
                path: path.to_string(),
                message: message.into(),
            });
        }
    }

    /// `None` when no error was recorded.
    pub fn finish(mut self) -> Option<PolicyErrors> {
        if self.list.is_empty() {
            return None;
        }
        // Stable sort keeps the walker's order for errors at one place.
        self.list.sort_by_key(|e| e.location);
        self.list.dedup();
        Some(PolicyErrors(self.list))
    }
}
