//! Label selectors (`metav1.LabelSelector`): `matchLabels` and
//! `matchExpressions`, ANDed; the empty selector `{}` matches everything.

use super::json::{At, Fail};
use std::collections::BTreeMap;

/// An object's labels.
pub type Labels = BTreeMap<String, String>;

/// A `matchExpressions` operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One `matchExpressions` item.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted; non-empty for `In`/`NotIn`, empty for the others.
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::In => value.is_some_and(|v| self.values.binary_search(v).is_ok()),
            Operator::NotIn => value.is_none_or(|v| self.values.binary_search(v).is_err()),
        }
    }
}

/// A label selector. `Default` is the empty selector, which matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// `matchLabels`, as (key, value) pairs sorted by key.
    pub match_labels: Vec<(String, String)>,
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// `key=value` for each pair: a shorthand for tests and tools.
    pub fn labels<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> LabelSelector {
        let mut match_labels: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        match_labels.sort();
        LabelSelector {
            match_labels,
            match_expressions: Vec::new(),
        }
    }

    /// Whether it is `{}`, which selects everything.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// A selector from the API's JSON, checked as the API server validates
    /// one (`In`/`NotIn` need values, `Exists`/`DoesNotExist` take none).
    pub(crate) fn parse(at: &At) -> Result<LabelSelector, Fail> {
        let mut match_labels = Vec::new();
        if let Some(ml) = at.field("matchLabels")? {
            for key in ml.object()?.keys() {
                let Some(field) = ml.field(key)? else {
                    return Err(ml.fail(format!("label {key:?} has no value")));
                };
                if key.is_empty() {
                    return Err(ml.fail("a label key must not be empty"));
                }
                match_labels.push((key.clone(), field.str()?.to_string()));
            }
        }
        match_labels.sort();
        let mut match_expressions = Vec::new();
        for item in at.list("matchExpressions")? {
            match_expressions.push(Self::requirement(&item)?);
        }
        Ok(LabelSelector {
            match_labels,
            match_expressions,
        })
    }

    fn requirement(at: &At) -> Result<Requirement, Fail> {
        let key = at.required("key")?.name()?.to_string();
        let op = at.required("operator")?;
        let operator = match op.str()? {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err(op.fail(format!(
                    "unknown operator {other:?}: expected In, NotIn, Exists or DoesNotExist"
                )))
            }
        };
        let mut values = Vec::new();
        for v in at.list("values")? {
            values.push(v.str()?.to_string());
        }
        values.sort();
        values.dedup();
        let wants_values = matches!(operator, Operator::In | Operator::NotIn);
        if wants_values && values.is_empty() {
            return Err(at.fail(format!("{operator:?} needs at least one value")));
        }
        if !wants_values && !values.is_empty() {
            return Err(at.fail(format!("{operator:?} takes no values")));
        }
        Ok(Requirement {
            key,
            operator,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(v: serde_json::Value) -> Result<LabelSelector, Fail> {
        LabelSelector::parse(&At::root(&v))
    }

    #[test]
    fn the_empty_selector_matches_everything_even_no_labels() {
        let s = sel(json!({})).unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&Labels::new()));
        assert!(s.matches(&labels(&[("app", "db")])));
        let s = sel(json!({"matchLabels": null, "matchExpressions": []})).unwrap();
        assert!(s.is_empty());
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = sel(json!({"matchLabels": {"app": "db", "tier": "be"}})).unwrap();
        assert!(s.matches(&labels(&[("app", "db"), ("tier", "be"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "db")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "fe")])));
    }

    #[test]
    fn each_operator_means_what_kubernetes_says() {
        let s = |op: &str, values: &[&str]| {
            sel(json!({"matchExpressions": [{"key": "env", "operator": op, "values": values}]}))
                .unwrap()
        };
        let prod = labels(&[("env", "prod")]);
        let dev = labels(&[("env", "dev")]);
        let none = Labels::new();
        let in_ = s("In", &["prod", "staging"]);
        assert!(in_.matches(&prod) && !in_.matches(&dev) && !in_.matches(&none));
        let not_in = s("NotIn", &["prod"]);
        assert!(!not_in.matches(&prod) && not_in.matches(&dev) && not_in.matches(&none));
        let exists = s("Exists", &[]);
        assert!(exists.matches(&prod) && exists.matches(&dev) && !exists.matches(&none));
        let absent = s("DoesNotExist", &[]);
        assert!(!absent.matches(&prod) && absent.matches(&none));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = sel(json!({"matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "db")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("env", "prod")])));
    }

    #[test]
    fn malformed_selectors_name_the_field() {
        let cases = [
            (json!([]), "", "expected an object, found a list"),
            (
                json!({"matchLabels": {"a": 1}}),
                "matchLabels.a",
                "expected a string",
            ),
            (
                json!({"matchLabels": "a=b"}),
                "matchLabels",
                "expected an object",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Has"}]}),
                "matchExpressions[0].operator",
                "unknown operator \"Has\"",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "matchExpressions[0]",
                "In needs at least one value",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "matchExpressions[0]",
                "Exists takes no values",
            ),
            (
                json!({"matchExpressions": [{"operator": "Exists"}]}),
                "matchExpressions[0].key",
                "missing",
            ),
        ];
        for (v, path, msg) in cases {
            let e = sel(v.clone()).expect_err(&v.to_string());
            assert_eq!(e.path, path, "{v}");
            assert!(e.message.contains(msg), "{v}: {}", e.message);
        }
    }
}
