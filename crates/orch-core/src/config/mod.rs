//! Configuration: experiments, hardware profiles, ladders and templates.
//!
//! # Theory of operation
//! Every kind of configuration lives in a directory of its own (`experiments/`, `profiles/`,
//! `ladders/`, `templates/`). The copies in this repository are compiled into the binary as
//! built-in defaults; a file with the same relative path in the project directory (the current
//! directory, or `--config-dir` / `ORCH_CONFIG_DIR`) replaces the built-in one, and new files add
//! new names. [`Catalog`] is that layered view. Each YAML file is parsed strictly: unknown keys
//! are errors, and every error names the file, line and key.
//!
//! Template files and template rules are written in one language, set up in [`jinja`]; it sits
//! here, below both the plan (which checks rules) and the renderer (which renders files).

pub mod experiment;
pub mod jinja;
pub mod ladder;
pub mod limits;
pub mod profile;
pub mod template;

/// The most attempts one run may make (`--max-attempts`, `max_attempts:`), and so the most
/// times a ladder step can usefully repeat.
pub const MAX_ATTEMPTS: u32 = 100;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};
use serde::de::DeserializeOwned;

use crate::error::ConfigError;

static BUILTIN_EXPERIMENTS: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../experiments");
static BUILTIN_PROFILES: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../profiles");
static BUILTIN_LADDERS: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../ladders");
static BUILTIN_TEMPLATES: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../templates");

/// The kinds of configuration, each a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Experiments,
    Profiles,
    Ladders,
    Templates,
}

impl Kind {
    /// The directory name, in the repository and in a project.
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Experiments => "experiments",
            Kind::Profiles => "profiles",
            Kind::Ladders => "ladders",
            Kind::Templates => "templates",
        }
    }

    fn builtin(self) -> &'static Dir<'static> {
        match self {
            Kind::Experiments => &BUILTIN_EXPERIMENTS,
            Kind::Profiles => &BUILTIN_PROFILES,
            Kind::Ladders => &BUILTIN_LADDERS,
            Kind::Templates => &BUILTIN_TEMPLATES,
        }
    }
}

/// Where a configuration file came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Origin {
    /// Compiled into the binary; the path is relative to the repository root.
    Builtin(String),
    /// A file in the project directory.
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin(rel) => write!(f, "{rel} (built-in)"),
            Origin::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One configuration file's text and where it came from.
#[derive(Debug, Clone)]
pub struct Doc {
    pub origin: Origin,
    pub text: String,
}

/// Built-in configuration layered under the project directory's files.
#[derive(Debug, Clone)]
pub struct Catalog {
    project_dir: PathBuf,
    /// Templates loaded so far: the members of a sweep share one (its key schema is most of
    /// a run's memory in a watcher driving hundreds).
    templates: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<template::Template>>>,
    >,
}

impl Catalog {
    /// A catalog whose user files live under `project_dir`.
    pub fn new(project_dir: impl Into<PathBuf>) -> Self {
        Self {
            project_dir: project_dir.into(),
            templates: Default::default(),
        }
    }

    /// Template `name`, loaded once per catalog.
    pub fn template(&self, name: &str) -> Result<std::sync::Arc<template::Template>, ConfigError> {
        let mut cache = self.templates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = cache.get(name) {
            return Ok(t.clone());
        }
        let t = std::sync::Arc::new(template::Template::load(self, name)?);
        cache.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// The project directory that overrides the built-in files.
    pub fn project_dir(&self) -> &Path {
        &self.project_dir
    }

    /// Read `kind/rel`: the project's file if there is one, else the built-in one. The
    /// project's is read under [`limits`]: a regular file of at most `MAX_CONFIG_BYTES`.
    pub fn read(&self, kind: Kind, rel: &str) -> Result<Option<Doc>, ConfigError> {
        let path = self.project_dir.join(kind.dir()).join(rel);
        if let Some(bytes) = limits::read_file(&path)? {
            let text = text_of(bytes).map_err(|message| ConfigError::Other {
                origin: path.display().to_string(),
                message,
            })?;
            return Ok(Some(Doc {
                origin: Origin::File(path),
                text,
            }));
        }
        Ok(kind.builtin().get_file(rel).map(|file| Doc {
            origin: Origin::Builtin(format!("{}/{rel}", kind.dir())),
            text: String::from_utf8_lossy(file.contents()).into_owned(),
        }))
    }

    /// Names defined for `kind`: `*.yaml` file stems (or, for templates, directories holding a
    /// `template.yaml`), built-in and project ones together, sorted.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        let mut names = BTreeSet::new();
        let builtin = kind.builtin();
        if kind == Kind::Templates {
            let dirs = builtin.dirs();
            names.extend(
                dirs.filter(|d| d.get_file(d.path().join("template.yaml")).is_some())
                    .map(|d| d.path().display().to_string()),
            );
        } else {
            names.extend(builtin.files().filter_map(|f| yaml_stem(f.path())));
        }
        if let Ok(entries) = std::fs::read_dir(self.project_dir.join(kind.dir())) {
            for path in entries.flatten().map(|e| e.path()) {
                let name = if kind == Kind::Templates {
                    path.join("template.yaml")
                        .is_file()
                        .then(|| file_name(&path))
                } else {
                    yaml_stem(&path)
                };
                names.extend(name);
            }
        }
        names.into_iter().collect()
    }

    /// Read and parse `kind/<name>.yaml`, or fail with the known names.
    pub fn load<T: DeserializeOwned>(
        &self,
        kind: Kind,
        kind_name: &'static str,
        name: &str,
    ) -> Result<(T, Origin), ConfigError> {
        let rel = if kind == Kind::Templates {
            format!("{name}/template.yaml")
        } else {
            format!("{name}.yaml")
        };
        if !valid_name(name) && self.names(kind).iter().any(|n| n == name) {
            return Err(ConfigError::Other {
                origin: self
                    .project_dir
                    .join(kind.dir())
                    .join(&rel)
                    .display()
                    .to_string(),
                message: format!(
                    "`{name}` is not a valid {kind_name} name: names use letters, digits, `-`, `_` and `.` (at most 64, not starting with `-` or `.`), since they end up in file and Slurm job names; rename the file"
                ),
            });
        }
        let doc = valid_name(name)
            .then(|| self.read(kind, &rel))
            .transpose()?
            .flatten();
        let Some(doc) = doc else {
            let known = self.names(kind);
            return Err(ConfigError::Unknown {
                kind: kind_name,
                name: name.to_string(),
                suggestion: crate::error::suggest(name, known.iter().map(String::as_str)),
                known,
            });
        };
        let value = parse_yaml(&doc)?;
        Ok((value, doc.origin))
    }
}

/// A configuration file's bytes as text, or why they are not YAML orch can read.
fn text_of(bytes: Vec<u8>) -> Result<String, String> {
    if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(
            "starts with a byte-order mark (U+FEFF), which YAML keys would include; save the file as UTF-8 without one"
                .into(),
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not a text file: byte {} is not UTF-8 (is it a YAML file?)",
            e.utf8_error().valid_up_to()
        )
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn yaml_stem(path: &Path) -> Option<String> {
    (path.extension()? == "yaml")
        .then(|| path.file_stem())
        .flatten()
        .map(|s| s.to_string_lossy().into_owned())
}

/// Names of experiments, profiles, ladders, templates and steps: they end up in file names,
/// Slurm job names and script comments, so they are kept to a safe alphabet.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['-', '.'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parse a YAML document strictly, naming file, line, column and key path on error; refused
/// first when past [`limits`] (its depth, its size with every alias written out).
pub fn parse_yaml<T: DeserializeOwned>(doc: &Doc) -> Result<T, ConfigError> {
    limits::check_yaml(&doc.origin.to_string(), &doc.text)?;
    // A mapping deserialised into a map keeps the last of two equal keys without a word;
    // as a plain YAML value the document is refused, with the key and its line.
    if let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(&doc.text)
        && e.to_string().contains("duplicate")
    {
        return Err(ConfigError::Parse {
            origin: doc.origin.to_string(),
            location: e.location().map(|l| (l.line(), l.column())),
            message: strip_location(&e.to_string()),
        });
    }
    let de = serde_yaml::Deserializer::from_str(&doc.text);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let location = inner.location().map(|l| (l.line(), l.column()));
        let text = inner.to_string();
        let mut message = if path.is_empty() || path == "." || text.starts_with(&path) {
            text.clone()
        } else {
            format!("{path}: {text}")
        };
        message = strip_location(&message);
        message.push_str(&unknown_field_hint(&path, &text));
        ConfigError::Parse {
            origin: doc.origin.to_string(),
            location,
            message,
        }
    })
}

/// Keys that were renamed: (old, new, what the new name says). An old key is refused with its
/// new name rather than read as an alias, so a file has one spelling and the error says the fix.
const RENAMED_KEYS: &[(&str, &str, &str)] = &[(
    "simulator",
    "trainer",
    "it names the trainer whose estimator, simulator, throughput model and log measurements apply",
)];

/// For serde's "unknown field `x`, expected one of `a`, `b`": a renamed key's new name, the closest known field, and
/// under a profile's `slurm:`, where any other `#SBATCH` option goes.
fn unknown_field_hint(path: &str, text: &str) -> String {
    let Some(rest) = text.split("unknown field `").nth(1) else {
        return String::new();
    };
    let name = rest.split('`').next().unwrap_or_default();
    let known: Vec<&str> = rest
        .split("expected one of ")
        .nth(1)
        .map(|list| {
            list.split(", ")
                .map(|k| k.trim_matches(['`', ' ']))
                .collect()
        })
        .unwrap_or_default();
    if let Some((_, new, why)) = RENAMED_KEYS
        .iter()
        .find(|(old, new, _)| *old == name && known.contains(new))
    {
        return format!("; `{name}:` was renamed `{new}:` ({why}): rename the key");
    }
    let mut hint = crate::error::suggest(name, known.iter().copied())
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    if hint.is_empty() && path.starts_with("slurm.") {
        hint.push_str(&format!(
            "; any other #SBATCH option goes in `slurm.extra`, e.g. extra: [\"--{}=…\"]",
            name.replace('_', "-")
        ));
    }
    hint
}

/// serde_yaml appends " at line L column C" to messages; the location is printed up front instead.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}
