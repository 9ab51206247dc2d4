//! Finding an experiment's architecture without the network.
//!
//! In order: the experiment's `architecture:` (a mapping of `config.json` keys, or a path to
//! a `config.json` or a model directory); the experiment's `model` as a local directory; the
//! local Hugging Face cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`; `models--ORG--NAME/snapshots/<rev>/config.json`, the revision
//! `refs/main` names first); the [`ModelTable`]. An explicit `architecture:` that cannot be
//! read is an error (the user asked for it); every other miss just moves on, and when all
//! miss the answer is [`Lookup::Unknown`] with what was tried.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::arch::{ArchError, Architecture};
use crate::table::ModelTable;

/// An experiment's `architecture:` value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ArchSpec {
    /// `config.json` keys written out.
    Keys(Architecture),
    /// A `config.json`, or a directory holding one (`~` expands; relative to the
    /// experiment file's directory).
    Path(PathBuf),
}

/// Where an architecture came from (said once to the user, recorded with the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "from")]
pub enum ArchSource {
    /// Keys written in the experiment.
    Experiment,
    /// A `config.json` the experiment pointed at.
    ConfigFile { path: PathBuf },
    /// The experiment's `model` is a local model directory.
    ModelDir { path: PathBuf },
    /// The local Hugging Face cache.
    HfCache { path: PathBuf },
    /// orch's table of common families.
    Table { name: String, file: String },
    /// A torchrun training config's own keys (`model.architecture.*`, or the Llama-style
    /// `model.d_model`…), named in `keys`.
    TrainingConfig { keys: &'static str },
}

impl std::fmt::Display for ArchSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArchSource::Experiment => write!(f, "the experiment's `architecture:`"),
            ArchSource::ConfigFile { path } => write!(f, "{}", path.display()),
            ArchSource::ModelDir { path } => write!(f, "the model directory {}", path.display()),
            ArchSource::HfCache { path } => {
                write!(f, "the Hugging Face cache ({})", path.display())
            }
            ArchSource::Table { name, file } => write!(f, "orch's model table ({name}, {file})"),
            ArchSource::TrainingConfig { keys } => write!(f, "the training config's {keys}"),
        }
    }
}

/// A known architecture and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub arch: Architecture,
    pub source: ArchSource,
}

/// The outcome of [`resolve`].
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Known(Box<Resolved>),
    /// Nothing knew the model; `tried` lists the places looked at, for the one message
    /// that says so.
    Unknown {
        tried: Vec<String>,
    },
}

/// Find the architecture of an experiment whose `model` is `model`.
///
/// `base` is the directory relative `architecture:` paths start from; `env` reads an
/// environment variable (injected so tests need not touch the process's environment).
pub fn resolve(
    spec: Option<&ArchSpec>,
    model: &str,
    table: &ModelTable,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Lookup, ArchError> {
    match spec {
        Some(ArchSpec::Keys(arch)) => {
            arch.validate()?;
            return Ok(known(arch.clone(), ArchSource::Experiment));
        }
        Some(ArchSpec::Path(p)) => {
            let path = base.join(expand_home(p, env));
            let arch = Architecture::from_config_file(&path)?;
            return Ok(known(arch, ArchSource::ConfigFile { path }));
        }
        None => {}
    }
    let mut tried = Vec::new();
    let dir = expand_home(Path::new(model), env);
    if dir.join("config.json").is_file() {
        let arch = Architecture::from_config_file(&dir)?;
        return Ok(known(arch, ArchSource::ModelDir { path: dir }));
    }
    tried.push(format!("no local directory {model}/config.json"));
    if let Some(repo) = hub_repo_dir_name(model) {
        for cache in hf_cache_dirs(env) {
            if let Some(config) = cached_config(&cache.join(&repo)) {
                // A broken cache entry is not the user's error: note it and move on.
                match Architecture::from_config_file(&config) {
                    Ok(arch) => return Ok(known(arch, ArchSource::HfCache { path: config })),
                    Err(e) => tried.push(e.to_string()),
                }
            } else {
                tried.push(format!("not in {}", cache.display()));
            }
        }
    }
    if let Some(m) = table.lookup(model) {
        return Ok(known(
            m.arch,
            ArchSource::Table {
                name: m.name,
                file: m.file,
            },
        ));
    }
    tried.push("not a family and size in orch's model table (models/*.yaml)".into());
    Ok(Lookup::Unknown { tried })
}

fn known(arch: Architecture, source: ArchSource) -> Lookup {
    Lookup::Known(Box::new(Resolved { arch, source }))
}

/// `p` with a leading `~` replaced by `$HOME`, as a shell (and Python's `expanduser`) would.
pub fn expand_home(p: &Path, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match (p.strip_prefix("~"), env("HOME")) {
        (Ok(rest), Some(home)) => Path::new(&home).join(rest),
        _ => p.to_path_buf(),
    }
}

/// `Qwen/Qwen2.5-7B-Instruct` → `models--Qwen--Qwen2.5-7B-Instruct`; `None` for anything
/// that is not an `ORG/NAME` hub id.
fn hub_repo_dir_name(model: &str) -> Option<String> {
    let (org, name) = model.split_once('/')?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (plain(org) && plain(name) && !org.starts_with('.')).then(|| format!("models--{org}--{name}"))
}

/// The Hugging Face hub caches to look in, most specific first.
pub fn hf_cache_dirs(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(hub) = set("HF_HUB_CACHE").or_else(|| set("HUGGINGFACE_HUB_CACHE")) {
        return vec![PathBuf::from(hub)];
    }
    if let Some(home) = set("HF_HOME") {
        return vec![Path::new(&home).join("hub")];
    }
    let cache = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".cache")));
    cache
        .map(|c| c.join("huggingface/hub"))
        .into_iter()
        .collect()
}

/// The `config.json` of a cached repository: the revision `refs/main` names, else the
/// newest snapshot that has one.
fn cached_config(repo: &Path) -> Option<PathBuf> {
    let snapshots = repo.join("snapshots");
    if let Ok(rev) = crate::input::read_config_text(&repo.join("refs/main")) {
        let config = snapshots.join(rev.trim()).join("config.json");
        if config.is_file() {
            return Some(config);
        }
    }
    std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("config.json"))
        .filter(|c| c.is_file())
        .max_by_key(|c| std::fs::metadata(c).and_then(|m| m.modified()).ok())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const TINY: &str = r#"{"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 688, "vocab_size": 32000, "model_type": "llama"}"#;

    fn env_of(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<String> + use<> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn lookup(
        spec: Option<&ArchSpec>,
        model: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Lookup {
        resolve(
            spec,
            model,
            ModelTable::builtin(),
            Path::new("/nonexistent"),
            env,
        )
        .unwrap()
    }

    #[test]
    fn the_hugging_face_cache_is_read_from_hf_home_and_hf_hub_cache() {
        let home = tempfile::tempdir().unwrap();
        let repo = home.path().join("hub/models--my-org--tiny-llama");
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(repo.join("snapshots/abc123/config.json"), TINY).unwrap();
        let env = env_of(&[("HF_HOME", home.path())]);
        let Lookup::Known(r) = lookup(None, "my-org/tiny-llama", &env) else {
            panic!("not found in the cache");
        };
        assert_eq!(r.arch.hidden_size, 256);
        assert!(matches!(r.source, ArchSource::HfCache { .. }));
        let env = env_of(&[("HF_HUB_CACHE", &home.path().join("hub"))]);
        assert!(matches!(
            lookup(None, "my-org/tiny-llama", &env),
            Lookup::Known(_)
        ));
        // The cache wins over the table (it is the model the job will load).
        let q = home
            .path()
            .join("hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/r1");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("config.json"), TINY).unwrap();
        let env = env_of(&[("HF_HOME", home.path())]);
        let Lookup::Known(r) = lookup(None, "Qwen/Qwen2.5-7B-Instruct", &env) else {
            panic!()
        };
        assert_eq!(r.arch.hidden_size, 256);
    }

    #[test]
    fn a_local_model_directory_and_explicit_specs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), TINY).unwrap();
        let none = |_: &str| None;
        let model = dir.path().display().to_string();
        let Lookup::Known(r) = lookup(None, &model, &none) else {
            panic!()
        };
        assert!(matches!(r.source, ArchSource::ModelDir { .. }));
        let spec = ArchSpec::Path(dir.path().join("config.json"));
        let Lookup::Known(r) = lookup(Some(&spec), "whatever", &none) else {
            panic!()
        };
        assert!(matches!(r.source, ArchSource::ConfigFile { .. }));
        let keys: ArchSpec = serde_yaml::from_str(
            "{hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 100}",
        )
        .unwrap();
        assert!(matches!(keys, ArchSpec::Keys(_)));
        let Lookup::Known(r) = lookup(Some(&keys), "whatever", &none) else {
            panic!()
        };
        assert_eq!(r.source, ArchSource::Experiment);
        let missing = ArchSpec::Path("/no/such/config.json".into());
        let err = resolve(
            Some(&missing),
            "m",
            ModelTable::builtin(),
            Path::new("/"),
            &none,
        );
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("/no/such/config.json")
        );
    }

    #[test]
    fn the_table_then_unknown_with_what_was_tried() {
        let empty = tempfile::tempdir().unwrap();
        let env = env_of(&[("HF_HOME", empty.path())]);
        let Lookup::Known(r) = lookup(None, "Qwen/Qwen2.5-7B-Instruct", &env) else {
            panic!()
        };
        assert!(matches!(r.source, ArchSource::Table { .. }));
        let Lookup::Unknown { tried } = lookup(None, "my-org/secret-13b", &env) else {
            panic!()
        };
        assert_eq!(tried.len(), 3, "{tried:?}");
        assert!(tried[1].contains("hub"), "{tried:?}");
    }

    #[test]
    fn hub_ids_and_cache_locations() {
        assert_eq!(
            hub_repo_dir_name("Qwen/Qwen2.5-7B").as_deref(),
            Some("models--Qwen--Qwen2.5-7B")
        );
        assert_eq!(hub_repo_dir_name("/abs/path"), None);
        assert_eq!(hub_repo_dir_name("../x"), None);
        assert_eq!(hub_repo_dir_name("gsa-512m"), None);
        let home = Path::new("/home/u");
        assert_eq!(
            hf_cache_dirs(&env_of(&[("HOME", home)])),
            vec![home.join(".cache/huggingface/hub")]
        );
    }
}
