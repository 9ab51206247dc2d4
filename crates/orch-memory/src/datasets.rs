//! How long a dataset's sequences really are, as data: `datasets/*.yaml` at the repository's
//! top level.
//!
//! ```yaml
//! dataset: gsm8k
//! match: [gsm8k]          # lower-cased substrings of the run's training files
//! prompt_tokens: 105      # mean tokens of a prompt, from real runs' logs
//! response_tokens: 240    # mean tokens of a response
//! sources: [...]          # where the figures come from
//! ```
//!
//! A trainer that removes padding packs real tokens, so the memory of a micro-batch follows
//! these lengths, not the padded maximum. The estimator uses them until an earlier attempt of
//! the run logged its own. A project's own `datasets/*.yaml` (the directory `--config-dir`
//! names) come first: [`load_project_dir`].

use std::sync::OnceLock;

use include_dir::{Dir, include_dir};
use serde::Deserialize;

use crate::table::embedded_yaml;

static BUILTIN_DATASETS: Dir = include_dir!("$CARGO_MANIFEST_DIR/../../datasets");

/// One dataset's document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// Its name.
    pub dataset: String,
    /// Lower-cased substrings of a training-file path that name it.
    #[serde(rename = "match")]
    pub patterns: Vec<String>,
    /// Mean tokens of a prompt.
    pub prompt_tokens: f64,
    /// Mean tokens of a response.
    pub response_tokens: f64,
    /// Where the figures come from.
    pub sources: Vec<String>,
}

impl Dataset {
    /// Real tokens of a sequence when prompts and responses are cut at these lengths.
    pub fn tokens_per_sequence(&self, max_prompt: u64, max_response: u64) -> f64 {
        self.prompt_tokens.min(max_prompt as f64) + self.response_tokens.min(max_response as f64)
    }
}

/// The datasets shipped with orch, in file-name order.
pub fn builtin() -> &'static [Dataset] {
    static TABLE: OnceLock<Vec<Dataset>> = OnceLock::new();
    TABLE.get_or_init(|| {
        embedded_yaml(&BUILTIN_DATASETS, "datasets")
            .into_iter()
            .map(|(name, text)| parse(&name, text).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    })
}

/// A project's own datasets, consulted before the built-in ones: set once per process by
/// [`load_project_dir`].
static PROJECT: OnceLock<Vec<Dataset>> = OnceLock::new();

/// A dataset file orch cannot use, with the file and what is wrong (serde's message names the
/// line and key).
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct DatasetError {
    pub file: String,
    pub message: String,
}

/// One dataset document, checked as the built-in ones are.
fn parse(file: &str, text: &str) -> Result<Dataset, DatasetError> {
    let err = |message: String| DatasetError {
        file: file.to_string(),
        message,
    };
    crate::input::check_yaml(text).map_err(|e| err(e.to_string()))?;
    let d: Dataset = serde_yaml::from_str(text).map_err(|e| err(e.to_string()))?;
    if d.patterns.is_empty() {
        return Err(err(
            "`match` needs at least one substring of the training files".into(),
        ));
    }
    let count = |t: f64| t.is_finite() && t > 0.0;
    if !(count(d.prompt_tokens) && count(d.response_tokens)) {
        return Err(err(
            "`prompt_tokens` and `response_tokens` must be positive token counts".into(),
        ));
    }
    Ok(Dataset {
        patterns: d.patterns.iter().map(|p| p.to_ascii_lowercase()).collect(),
        ..d
    })
}

/// Read a project directory's `datasets/*.yaml` (none when it has no such directory) and
/// consult them before the built-in ones from now on, in file-name order. Returns how many
/// were read. A process reads one project's: a second call keeps the first one's. Each file is
/// read under [`crate::input`]'s limits.
pub fn load_project_dir(dir: &std::path::Path) -> Result<usize, DatasetError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.display().to_string();
        // A regular file within the limit: a link to /dev/zero or a FIFO is refused by name.
        let text = crate::input::read_config_text(&path).map_err(|e| DatasetError {
            file: file.clone(),
            message: e.kind.to_string(),
        })?;
        out.push(parse(&file, &text)?);
    }
    let n = out.len();
    let _ = PROJECT.set(out);
    Ok(n)
}

/// The first dataset whose pattern a training-files value (a path, or a list of paths as
/// Hydra writes it) contains: the project's, then the built-in ones.
pub fn lookup(train_files: &str) -> Option<&'static Dataset> {
    let lower = train_files.to_ascii_lowercase();
    PROJECT
        .get()
        .into_iter()
        .flatten()
        .chain(builtin())
        .find(|d| d.patterns.iter().any(|p| lower.contains(p.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gsm8k_is_found_in_a_path_or_a_list() {
        let d = lookup("$HOME/data/gsm8k/train.parquet").expect("gsm8k");
        assert_eq!(d.dataset, "gsm8k");
        assert!(lookup("['/data/GSM8K/train.parquet']").is_some());
        assert!(lookup("/data/math/train.parquet").is_none());
        assert!(d.sources.iter().all(|s| s.contains("at ")));
    }

    #[test]
    fn a_bad_dataset_file_is_refused_with_its_name_and_key() {
        let refused = |text: &str| parse("datasets/mine.yaml", text).unwrap_err().to_string();
        let e = refused("dataset: mine\nmatch: [mine]\nprompt_tokens: 100\n");
        assert!(
            e.starts_with("datasets/mine.yaml: ") && e.contains("response_tokens"),
            "{e}"
        );
        let e = refused(
            "dataset: mine\nmatch: []\nprompt_tokens: 100\nresponse_tokens: 50\nsources: []\n",
        );
        assert!(e.contains("`match`"), "{e}");
        let e = refused(
            "dataset: mine\nmatch: [Mine]\nprompt_tokens: 100\nresponse_tokens: -5\nsources: []\n",
        );
        assert!(e.contains("positive"), "{e}");
        let e = refused("dataset: mine\nmatch: [m]\nprompt: 1\n");
        assert!(
            e.contains("unknown field `prompt`") && e.contains("line 3"),
            "{e}"
        );
    }

    #[test]
    fn lengths_are_cut_at_the_run_maxima() {
        let d = lookup("gsm8k").expect("gsm8k");
        assert_eq!(d.tokens_per_sequence(1024, 1024), 345.0);
        assert_eq!(d.tokens_per_sequence(1024, 128), 233.0);
    }
}
