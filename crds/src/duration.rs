//! Durations written as strings with units (`"30s"`, `"1m30s"`, `"250ms"`), as CRD fields carry them.

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Pattern every duration string must match: one or more `<integer><unit>` groups, unit one of
/// `ms`, `s`, `m`, `h`. The API server enforces it; [`DurationString::to_duration`] re-checks it.
pub const DURATION_PATTERN: &str = "^([0-9]+(ms|s|m|h))+$";

/// A duration string such as `"10s"` or `"1m30s"`.
///
/// Shape: one or more `<integer><unit>` groups with unit `ms`, `s`, `m` or `h`, no spaces
/// (the subset of Go's `time.ParseDuration` syntax that Kubernetes users already write).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DurationString(pub String);

/// Longest duration any field accepts: 168h (one week). Longer budgets are mistakes, and the
/// bound keeps deadline arithmetic far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(168 * 3600);

/// A duration string that does not follow [`DURATION_PATTERN`] or is out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {value:?}: {reason}")]
pub struct DurationError {
    /// The rejected text.
    pub value: String,
    /// Why, for the user.
    pub reason: &'static str,
}

const SYNTAX: &str = "expected digits followed by ms, s, m or h, for example \"30s\"";
const TOO_LONG: &str = "longer than the maximum of 168h";

impl DurationString {
    /// Builds a duration string from text, without checking it.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Parses the string into a [`Duration`].
    ///
    /// # Errors
    /// [`DurationError`] when the text does not match [`DURATION_PATTERN`] or overflows.
    pub fn to_duration(&self) -> Result<Duration, DurationError> {
        let err = || DurationError {
            value: self.0.clone(),
            reason: SYNTAX,
        };
        // humantime accepts a wider language ("10 sec", "1min"); restrict it to the CRD's own
        // pattern, so the proxy and the API server accept exactly the same strings.
        static PATTERN: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(DURATION_PATTERN).expect("DURATION_PATTERN is a regex"));
        if !PATTERN.is_match(&self.0) {
            return Err(err());
        }
        let too_long = || DurationError {
            value: self.0.clone(),
            reason: TOO_LONG,
        };
        match humantime::parse_duration(&self.0) {
            Ok(duration) if duration <= MAX_DURATION => Ok(duration),
            Ok(_) => Err(too_long()),
            // Syntax is already checked above: what is left is a number too large to represent.
            Err(_) => Err(too_long()),
        }
    }
}

impl fmt::Display for DurationString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for DurationString {
    fn schema_name() -> Cow<'static, str> {
        "DurationString".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "maxLength": 32,
            "x-kubernetes-validations": [{
                "rule": "duration(self) <= duration('168h')",
                "message": "must be at most 168h",
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Duration, DurationError> {
        DurationString::new(s).to_duration()
    }

    #[test]
    fn duration_units_parse_to_exact_values() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn duration_malformed_text_is_rejected() {
        for bad in [
            "", "10", "s", "10 s", "1.5s", "-1s", "10sec", "10S", "5hs", "1s5",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn duration_out_of_pattern_units_get_the_syntax_error_not_too_long() {
        for bad in ["5sm", "5hs", "1mh"] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.reason, SYNTAX, "{bad:?}: {err}");
        }
        assert_eq!(
            parse("999999999999999999999h").map_err(|e| e.reason),
            Err(TOO_LONG)
        );
    }
}
