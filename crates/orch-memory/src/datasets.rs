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
//! the run logged its own.

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
            .map(|(name, text)| {
                let d: Dataset =
                    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(
                    !d.patterns.is_empty() && d.prompt_tokens > 0.0 && d.response_tokens > 0.0,
                    "{name}: `match` and both token means are required"
                );
                d
            })
            .collect()
    })
}

/// The first dataset whose pattern a training-files value (a path, or a list of paths as
/// Hydra writes it) contains.
pub fn lookup(train_files: &str) -> Option<&'static Dataset> {
    let lower = train_files.to_ascii_lowercase();
    builtin()
        .iter()
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
    fn lengths_are_cut_at_the_run_maxima() {
        let d = lookup("gsm8k").expect("gsm8k");
        assert_eq!(d.tokens_per_sequence(1024, 1024), 345.0);
        assert_eq!(d.tokens_per_sequence(1024, 128), 233.0);
    }
}
