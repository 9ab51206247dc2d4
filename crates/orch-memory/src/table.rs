//! Common model families as data: `models/*.yaml` at the repository's top level.
//!
//! One YAML document per family (a file may hold several, separated by `---`):
//!
//! ```yaml
//! family: Qwen2.5
//! match: [qwen2.5]            # lower-cased substrings of a model name
//! model_type: qwen2
//! sizes:
//!   7B: {hidden_size: 3584, num_hidden_layers: 28, ...}   # config.json keys
//! ```
//!
//! A name matches a family when it contains one of `match` and the size in its last path
//! component (`Qwen2.5-7B-Instruct` → 7B, `1.5b`, `512M`) is one of `sizes` (within 2 %).
//! Families are tried in file-name order, documents in file order; a project's own
//! `models/*.yaml` (read by `orch` for the commands that estimate) before the built-in ones.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use include_dir::{Dir, include_dir};
use regex::Regex;
use serde::Deserialize;

use crate::arch::Architecture;

static BUILTIN_MODELS: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../models");

/// The project's families over the built-in ones, once read ([`ModelTable::load_project_dir`]).
static PROJECT: OnceLock<ModelTable> = OnceLock::new();

/// The `.yaml` files of an embedded directory in file-name order, each as (`<dir>/<file>`,
/// its text): the built-in data files (`models/`, `datasets/`).
pub(crate) fn embedded_yaml<'a>(files: &'a Dir<'a>, dir: &str) -> Vec<(String, &'a str)> {
    let mut out: Vec<_> = files
        .files()
        .filter(|f| f.path().extension().is_some_and(|e| e == "yaml"))
        .map(|f| {
            let name = format!("{dir}/{}", f.path().display());
            let text = f
                .contents_utf8()
                .unwrap_or_else(|| panic!("{name}: built-in data files are UTF-8"));
            (name, text)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Does any YAML document of `text` have a top-level `family:` key (a model family's file)? A
/// text YAML cannot parse counts as one, so that its error is shown.
fn names_a_family(text: &str) -> bool {
    if crate::input::check_yaml(text).is_err() {
        return true;
    }
    let mut any = false;
    for doc in serde_yaml::Deserializer::from_str(text) {
        match serde_yaml::Value::deserialize(doc) {
            Ok(serde_yaml::Value::Mapping(m)) if m.contains_key("family") => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
        any = true;
    }
    !any
}

/// One family's document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Family {
    family: String,
    #[serde(rename = "match")]
    patterns: Vec<String>,
    #[serde(default)]
    model_type: Option<String>,
    sizes: BTreeMap<String, Architecture>,
}

/// A table file that cannot be used, with the file and (from the YAML parser) line named.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct TableError {
    pub file: String,
    pub message: String,
}

/// Known model families and their sizes.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    families: Vec<(String, Family)>,
}

/// A table entry that matched a name.
#[derive(Debug, Clone, PartialEq)]
pub struct TableMatch {
    /// `Qwen2.5-7B`.
    pub name: String,
    /// The file it came from.
    pub file: String,
    pub arch: Architecture,
}

impl ModelTable {
    /// The families shipped with orch.
    pub fn builtin() -> &'static ModelTable {
        static TABLE: OnceLock<ModelTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            let mut table = ModelTable::default();
            for (name, text) in embedded_yaml(&BUILTIN_MODELS, "models") {
                table
                    .add_file(&name, text)
                    .unwrap_or_else(|e| panic!("built-in model table: {e}"));
            }
            table
        })
    }

    /// The table the estimates of this process use: the project's `models/` over the built-in
    /// families once [`ModelTable::load_project_dir`] has read them, else the built-in ones.
    pub fn current() -> &'static ModelTable {
        PROJECT.get().unwrap_or_else(ModelTable::builtin)
    }

    /// Read a project's `models/*.yaml` (each a regular file within the configuration's size
    /// limit) and put their families ahead of the built-in ones, the project's files in
    /// file-name order: what [`ModelTable::current`] gives from then on. A file with no
    /// document naming a `family:` is someone else's (a repository's `models/yolov5s.yaml`,
    /// an mmdet config) and is skipped; one that names a family and cannot be used is refused
    /// with its name (and the parser's line). Returns the files skipped; a project without
    /// `models/` reads none.
    pub fn load_project_dir(dir: &std::path::Path) -> Result<Vec<String>, TableError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(TableError {
                    file: dir.display().to_string(),
                    message: format!("cannot read the project's model families: {e}"),
                });
            }
        };
        let mut files: Vec<std::path::PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        let mut table = ModelTable::builtin().clone();
        let mut skipped = Vec::new();
        // Each file goes ahead of what is there: the last one added is tried first.
        for path in files.iter().rev() {
            let file = path.display().to_string();
            let text = crate::input::read_config_text(path).map_err(|e| TableError {
                file: file.clone(),
                message: e.kind.to_string(),
            })?;
            if !names_a_family(&text) {
                skipped.push(file);
                continue;
            }
            table.add_file(&file, &text)?;
        }
        let _ = PROJECT.set(table);
        skipped.reverse();
        Ok(skipped)
    }

    /// Add the families of one file, ahead of those already in the table (a user's file
    /// is consulted before the built-in ones).
    pub fn add_file(&mut self, file: &str, text: &str) -> Result<(), TableError> {
        let err = |message: String| TableError {
            file: file.to_string(),
            message,
        };
        crate::input::check_yaml(text).map_err(|e| err(e.to_string()))?;
        let mut added = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(text) {
            let fam = Family::deserialize(doc).map_err(|e| err(e.to_string()))?;
            if fam.patterns.is_empty() {
                return Err(err(format!("family `{}` has an empty `match`", fam.family)));
            }
            for (size, arch) in &fam.sizes {
                if params_from_name(size).is_none() {
                    return Err(err(format!(
                        "family `{}`: size `{size}` is not a parameter count like 7B or 512M",
                        fam.family
                    )));
                }
                arch.validate()
                    .map_err(|e| err(format!("family `{}` size {size}: {e}", fam.family)))?;
            }
            added.push((file.to_string(), fam));
        }
        added.append(&mut self.families);
        self.families = added;
        Ok(())
    }

    /// Every size of the first family named `family`, as `(size label, architecture)`.
    pub fn family(&self, family: &str) -> Vec<(String, Architecture)> {
        self.families
            .iter()
            .find(|(_, f)| f.family == family)
            .map(|(_, f)| {
                f.sizes
                    .iter()
                    .map(|(l, a)| (l.clone(), a.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The table entry for a model name or path, if its family and size are known.
    pub fn lookup(&self, model: &str) -> Option<TableMatch> {
        let lower = model.to_ascii_lowercase();
        let base = lower
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&lower);
        let size = params_from_name(base)?;
        for (file, fam) in &self.families {
            if !fam
                .patterns
                .iter()
                .any(|p| base.contains(&p.to_ascii_lowercase()))
            {
                continue;
            }
            for (label, arch) in &fam.sizes {
                let Some(p) = params_from_name(label) else {
                    continue;
                };
                if (size - p).abs() / p < 0.02 {
                    let mut arch = arch.clone();
                    if arch.model_type.is_none() {
                        arch.model_type.clone_from(&fam.model_type);
                    }
                    return Some(TableMatch {
                        name: format!("{}-{label}", fam.family),
                        file: file.clone(),
                        arch,
                    });
                }
            }
        }
        None
    }
}

/// Parameter count in a model name (`7B`, `1.5b`, `512M`), in parameters. The first count
/// is taken: a mixture of experts' total where its name puts it first (`Qwen3-30B-A3B` → 30B),
/// but its active count where the name does (OLMoE's `1B-7B` → 1B, Qwen1.5-MoE's `A2.7B` →
/// 2.7B): such a model is known by the table, not by this. A Mixtral-style `8x7B` counts
/// 8 × 7B: more than the model (its experts share attention and embeddings: 46.7B), never
/// less.
pub fn params_from_name(name: &str) -> Option<f64> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"(?i)(?:^|[^0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?:[^a-z0-9]|$)")
            .expect("size regex")
    });
    let base = name.rsplit('/').next().unwrap_or(name);
    let caps = re.captures(base)?;
    let experts: f64 = caps.get(1).map_or(Some(1.0), |m| m.as_str().parse().ok())?;
    let n: f64 = caps[2].parse().ok()?;
    let scale = if caps[3].eq_ignore_ascii_case("b") {
        1e9
    } else {
        1e6
    };
    Some(experts * n * scale).filter(|p| *p > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mixtures of experts: total and active parameters as their model cards publish them
    /// (Qwen3-30B-A3B 30.5B/3.3B, Qwen3-235B-A22B 235B/22B, Qwen1.5-MoE-A2.7B 14.3B/2.7B,
    /// Qwen2-57B-A14B 57.4B/14B, Mixtral-8x7B 46.7B/12.9B, Mixtral-8x22B 141B/39B,
    /// OLMoE-1B-7B 6.9B/1.3B), within 3 %.
    #[test]
    fn mixtures_of_experts_match_their_published_counts() {
        let t = ModelTable::builtin();
        for (name, family_size, total, active) in [
            ("Qwen/Qwen3-30B-A3B-Base", "Qwen3-MoE-30B-A3B", 30.5, 3.3),
            ("Qwen/Qwen3-235B-A22B", "Qwen3-MoE-235B-A22B", 235.0, 22.0),
            ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "Qwen2-MoE-A2.7B", 14.3, 2.7),
            (
                "Qwen/Qwen2-57B-A14B-Instruct",
                "Qwen2-MoE-57B-A14B",
                57.4,
                14.0,
            ),
            (
                "mistralai/Mixtral-8x7B-Instruct-v0.1",
                "Mixtral-8x7B",
                46.7,
                12.9,
            ),
            ("mistralai/Mixtral-8x22B-v0.1", "Mixtral-8x22B", 141.0, 39.0),
            ("allenai/OLMoE-1B-7B-0924", "OLMoE-1B-7B", 6.9, 1.3),
        ] {
            let m = t
                .lookup(name)
                .unwrap_or_else(|| panic!("{name} is in the table"));
            assert_eq!(m.name, family_size);
            let (p, a) = (m.arch.params() / 1e9, m.arch.active_params() / 1e9);
            assert!(
                (p / total - 1.0).abs() < 0.03,
                "{name}: {p:.2}B of {total}B"
            );
            assert!(
                (a / active - 1.0).abs() < 0.03,
                "{name}: {a:.2}B active of {active}B"
            );
        }
        // The dense Qwen3 of a near size is still the dense one.
        assert_eq!(t.lookup("Qwen/Qwen3-32B").unwrap().name, "Qwen3-32B");
        assert!(t.lookup("Qwen/Qwen3-32B").unwrap().arch.experts().is_none());
    }

    #[test]
    fn builtin_families_resolve_by_name() {
        let t = ModelTable::builtin();
        let q7 = t.lookup("Qwen/Qwen2.5-7B-Instruct").unwrap();
        assert_eq!(q7.name, "Qwen2.5-7B");
        assert_eq!(q7.arch.num_hidden_layers, 28);
        assert_eq!(q7.arch.model_type.as_deref(), Some("qwen2"));
        assert_eq!(
            t.lookup("/models/Qwen2.5-Math-1.5B").unwrap().name,
            "Qwen2.5-1.5B"
        );
        assert_eq!(
            t.lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap().name,
            "Llama-3.1-8B"
        );
        assert_eq!(
            t.lookup("meta-llama/Llama-3.2-1B").unwrap().arch.head_dim,
            Some(64)
        );
        assert_eq!(
            t.lookup("meta-llama/Meta-Llama-3-8B").unwrap().name,
            "Llama-3-8B"
        );
        assert_eq!(t.lookup("Qwen/Qwen3-0.6B").unwrap().arch.head_dim(), 128);
        assert_eq!(
            t.lookup("deepseek-ai/deepseek-llm-7b-chat")
                .unwrap()
                .arch
                .kv_heads(),
            32
        );
        assert_eq!(
            t.lookup("mistralai/Mistral-7B-Instruct-v0.3").unwrap().name,
            "Mistral-7B"
        );
        // R1's distills: their own family (the 1.5B does not tie its embeddings, as
        // Qwen2.5-1.5B does), whatever a path puts before the name.
        let r1 = t
            .lookup("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
            .unwrap();
        assert_eq!(r1.name, "DeepSeek-R1-Distill-Qwen-1.5B");
        assert!(!r1.arch.tie_word_embeddings);
        assert!(
            (r1.arch.params() / 1e9 - 1.777).abs() < 0.01,
            "{}",
            r1.arch.params()
        );
        assert_eq!(
            t.lookup("/ckpt/DeepSeek-R1-Distill-Qwen-7B")
                .unwrap()
                .arch
                .vocab_size,
            152064
        );
        assert_eq!(
            t.lookup("deepseek-ai/DeepSeek-R1-Distill-Llama-8B")
                .unwrap()
                .name,
            "DeepSeek-R1-Distill-Llama-8B"
        );
    }

    #[test]
    fn every_builtin_size_matches_its_published_parameter_count() {
        // The size label is the model card's rounded count; the shape must agree within the
        // rounding (0.5B is 0.49B; 1.7B is 2.03B with its tied embedding counted once). A
        // mixture of experts' name gives its total (30B-A3B), its active count (A2.7B, OLMoE's
        // 1B-7B) or experts × size (8x7B: 56B for 46.7B; 8x22B: 176B for 141B).
        for (file, fam) in &ModelTable::builtin().families {
            for (label, arch) in &fam.sizes {
                let named = params_from_name(label).unwrap();
                let agrees = |p: f64, lo: f64, hi: f64| (lo..hi).contains(&(p / named));
                assert!(
                    agrees(arch.params(), 0.85, 1.25)
                        || arch.experts().is_some()
                            && (agrees(arch.params(), 0.75, 1.25)
                                || agrees(arch.active_params(), 0.85, 1.3)),
                    "{file} {} {label}: shape gives {:.3}B",
                    fam.family,
                    arch.params() / 1e9
                );
            }
        }
    }

    #[test]
    fn unknown_names_and_sizes_are_not_guessed() {
        let t = ModelTable::builtin();
        assert_eq!(t.lookup("my-org/custom-13b"), None);
        assert_eq!(t.lookup("Qwen/Qwen2.5-9B"), None);
        assert_eq!(t.lookup("gsa-512m"), None);
        assert_eq!(t.lookup("gpt2"), None);
    }

    #[test]
    fn a_users_file_comes_first_and_bad_files_name_themselves() {
        let mut t = ModelTable::builtin().clone();
        t.add_file(
            "models/mine.yaml",
            "family: Mine\nmatch: [qwen2.5]\nsizes:\n  7B: {hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 1000}\n",
        )
        .unwrap();
        assert_eq!(t.lookup("Qwen2.5-7B").unwrap().name, "Mine-7B");
        let err = t
            .add_file(
                "models/bad.yaml",
                "family: X\nmatch: [x]\nsizes:\n  huge: {hidden_size: 1}\n",
            )
            .unwrap_err();
        assert!(err.to_string().starts_with("models/bad.yaml: "), "{err}");
        let typo = t
            .add_file("models/typo.yaml", "family: X\nmatchs: [x]\nsizes: {}\n")
            .unwrap_err();
        assert!(typo.to_string().contains("matchs"), "{typo}");
    }

    #[test]
    fn sizes_parse_from_names() {
        assert_eq!(params_from_name("Qwen2.5-7B-Instruct"), Some(7e9));
        assert_eq!(params_from_name("Qwen2.5-1.5B"), Some(1.5e9));
        assert_eq!(params_from_name("gsa-512m"), Some(512e6));
        assert_eq!(params_from_name("gpt2"), None);
    }
}
