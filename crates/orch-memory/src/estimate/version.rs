//! A trainer's release, as a user states it: an experiment's `trainer_version: "0.6.1"`, what
//! `pip show verl` prints. Only the release line (major.minor) changes what the memory model
//! does, so that is all this keeps; the text is kept to say it back.
//!
//! Python versions follow PEP 440 (`0.8.0.dev`, `0.3.0.post1`, `0.5.0rc1`), which semver
//! parsers refuse, and a PEP 440 crate would parse far more than the two numbers used here:
//! the leading `major.minor` is read, the rest is kept as text.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// A trainer's release line, with the text it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainerVersion {
    /// The leading number.
    pub major: u32,
    /// The second number.
    pub minor: u32,
    /// As the user wrote it.
    pub text: String,
}

impl TrainerVersion {
    /// Its release line `(major, minor)`, which compares as releases do (`v.line() >= (0, 6)`).
    pub fn line(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

/// Why a version did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "trainer version {0:?} is not a release: write it as `pip show` prints it (\"0.6.1\", \"0.8.0.dev\")"
)]
pub struct VersionError(pub String);

impl FromStr for TrainerVersion {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let bare = text.strip_prefix(['v', 'V']).unwrap_or(text);
        let mut parts = bare.split('.');
        // The digits each part starts with (`0.5.0rc1`, `1.0a2`: before a pre-release tag).
        let number = |p: Option<&str>| -> Option<u32> {
            let digits: String = p?.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        match (number(parts.next()), number(parts.next())) {
            (Some(major), Some(minor)) => Ok(Self {
                major,
                minor,
                text: text.to_string(),
            }),
            _ => Err(VersionError(text.to_string())),
        }
    }
}

impl fmt::Display for TrainerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for TrainerVersion {
    /// A string (`"0.6.1"`), or a YAML number (`0.6`: quote a version whose minor has a
    /// trailing zero, `"0.10"`, or YAML reads it as 0.1). A visitor rather than an untagged
    /// enum, so that an error points at the value's line.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = TrainerVersion;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a release as `pip show` prints it (\"0.6.1\")")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TrainerVersion, E> {
                s.parse().map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<TrainerVersion, E> {
                // `1.0` is read as the number 1: keep its minor.
                if f.fract() == 0.0 {
                    self.visit_str(&format!("{f:.1}"))
                } else {
                    self.visit_str(&f.to_string())
                }
            }
            fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<TrainerVersion, E> {
                self.visit_str(&format!("{u}.0"))
            }
            fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<TrainerVersion, E> {
                self.visit_str(&i.to_string())
            }
        }
        d.deserialize_any(Text)
    }
}

impl serde::Serialize for TrainerVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_versions_parse_to_their_release_line() {
        for (text, line) in [
            ("0.6.1", (0, 6)),
            ("0.8.0.dev", (0, 8)),
            ("v0.5.0", (0, 5)),
            ("0.3.0.post1", (0, 3)),
            ("0.5.0rc1", (0, 5)),
            ("1.0", (1, 0)),
            (" 0.10.2 ", (0, 10)),
        ] {
            let v: TrainerVersion = text.parse().unwrap();
            assert_eq!((v.major, v.minor), line, "{text}");
            assert_eq!(v.text, text.trim());
        }
        for bad in ["", "latest", "0", ".6", "main", "x.6"] {
            assert!(bad.parse::<TrainerVersion>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn comparisons_are_by_release_line() {
        let v: TrainerVersion = "0.6.0".parse().unwrap();
        assert!(v.line() >= (0, 6));
        assert!(v.line() < (0, 7));
        let v: TrainerVersion = "0.5.0.dev".parse().unwrap();
        assert!(v.line() < (0, 6));
    }

    #[test]
    fn yaml_numbers_and_strings_read_alike() {
        let v: TrainerVersion = serde_yaml::from_str("0.6").unwrap();
        assert_eq!((v.major, v.minor), (0, 6));
        let v: TrainerVersion = serde_yaml::from_str("\"0.6.1\"").unwrap();
        assert_eq!(v.text, "0.6.1");
        let v: TrainerVersion = serde_yaml::from_str("0.6.1").unwrap();
        assert_eq!(v.text, "0.6.1");
        let v: TrainerVersion = serde_yaml::from_str("1.0").unwrap();
        assert_eq!((v.major, v.minor), (1, 0));
        let e = serde_yaml::from_str::<TrainerVersion>("latest").unwrap_err();
        assert!(e.to_string().contains("not a release"), "{e}");
    }
}
