//! Model architectures the simulator knows, from the models' public Hugging Face `config.json`
//! files (`num_hidden_layers`, `hidden_size`, `num_key_value_heads`, `head_dim` or
//! `hidden_size / num_attention_heads`, `intermediate_size`, `vocab_size`,
//! `tie_word_embeddings`) and the parameter counts on their model cards.
//!
//! Unknown names fall back to the known shape nearest in size (size parsed from the name, e.g.
//! `my-org/custom-13b`), or to a Qwen2.5-7B-like shape when the name carries no size.

use std::sync::OnceLock;

use regex::Regex;

/// The shape of a decoder-only transformer, as far as memory is concerned.
#[derive(Debug, Clone, PartialEq)]
pub struct Arch {
    /// Canonical name from the table, or a description of the fallback.
    pub name: String,
    /// Total parameters (embeddings included).
    pub params: f64,
    /// Decoder layers.
    pub layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Key/value heads (GQA).
    pub kv_heads: u32,
    /// Per-head dimension.
    pub head_dim: u32,
    /// MLP intermediate size.
    pub intermediate: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// Input embedding and LM head share one matrix.
    pub tied_embeddings: bool,
    /// `true` when the name matched the table exactly (not a fallback).
    pub known: bool,
}

impl Arch {
    /// Parameters of one embedding matrix (vocab × hidden).
    pub fn embed_params(&self) -> f64 {
        self.vocab as f64 * self.hidden as f64
    }

    /// Parameters of one decoder layer (what FSDP wraps and gathers as a unit).
    pub fn layer_params(&self) -> f64 {
        let embeds = if self.tied_embeddings { 1.0 } else { 2.0 } * self.embed_params();
        ((self.params - embeds) / self.layers as f64).max(1.0)
    }

    /// Largest FSDP unit: a decoder layer or an embedding matrix, whichever is bigger.
    pub fn largest_unit_params(&self) -> f64 {
        self.layer_params().max(self.embed_params())
    }

    /// Bytes of bf16 K+V cache per token on one GPU with tensor parallelism `tp`
    /// (KV heads are split over TP ranks and replicated when there are fewer heads than ranks).
    pub fn kv_bytes_per_token(&self, tp: u32) -> f64 {
        let tp = tp.max(1);
        let heads_per_gpu = self.kv_heads.div_ceil(tp).max(1);
        2.0 * self.layers as f64 * heads_per_gpu as f64 * self.head_dim as f64 * 2.0
    }
}

/// (family key, size label, params, layers, hidden, kv_heads, head_dim, intermediate, vocab, tied)
type Row = (
    &'static str,
    &'static str,
    f64,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    bool,
);

/// Public configs. Family keys are matched against the lower-cased model path.
const TABLE: &[Row] = &[
    // Qwen/Qwen2.5-*-Instruct (also Qwen2.5-Math-*, Qwen2.5-Coder-* of the same size)
    (
        "qwen2.5", "0.5b", 0.494e9, 24, 896, 2, 64, 4864, 151_936, true,
    ),
    (
        "qwen2.5", "1.5b", 1.544e9, 28, 1536, 2, 128, 8960, 151_936, true,
    ),
    (
        "qwen2.5", "3b", 3.086e9, 36, 2048, 2, 128, 11008, 151_936, true,
    ),
    (
        "qwen2.5", "7b", 7.616e9, 28, 3584, 4, 128, 18944, 152_064, false,
    ),
    (
        "qwen2.5", "14b", 14.77e9, 48, 5120, 8, 128, 13824, 152_064, false,
    ),
    (
        "qwen2.5", "32b", 32.76e9, 64, 5120, 8, 128, 27648, 152_064, false,
    ),
    (
        "qwen2.5", "72b", 72.71e9, 80, 8192, 8, 128, 29568, 152_064, false,
    ),
    // Qwen/Qwen3-*
    (
        "qwen3", "0.6b", 0.596e9, 28, 1024, 8, 128, 3072, 151_936, true,
    ),
    (
        "qwen3", "1.7b", 2.03e9, 28, 2048, 8, 128, 6144, 151_936, true,
    ),
    ("qwen3", "4b", 4.02e9, 36, 2560, 8, 128, 9728, 151_936, true),
    (
        "qwen3", "8b", 8.19e9, 36, 4096, 8, 128, 12288, 151_936, false,
    ),
    (
        "qwen3", "14b", 14.77e9, 40, 5120, 8, 128, 17408, 151_936, false,
    ),
    (
        "qwen3", "32b", 32.8e9, 64, 5120, 8, 128, 25600, 151_936, false,
    ),
    // meta-llama/Llama-3.x-*
    (
        "llama-3.1",
        "8b",
        8.03e9,
        32,
        4096,
        8,
        128,
        14336,
        128_256,
        false,
    ),
    (
        "llama-3.1",
        "70b",
        70.6e9,
        80,
        8192,
        8,
        128,
        28672,
        128_256,
        false,
    ),
    (
        "llama-3.2",
        "1b",
        1.236e9,
        16,
        2048,
        8,
        64,
        8192,
        128_256,
        true,
    ),
    (
        "llama-3.2",
        "3b",
        3.213e9,
        28,
        3072,
        8,
        128,
        8192,
        128_256,
        true,
    ),
    (
        "llama-3-", "8b", 8.03e9, 32, 4096, 8, 128, 14336, 128_256, false,
    ),
    // deepseek-ai/deepseek-llm-7b-chat (verl's default actor_rollout_ref.model.path)
    (
        "deepseek-llm",
        "7b",
        6.91e9,
        30,
        4096,
        32,
        128,
        11008,
        102_400,
        false,
    ),
];

/// Display names for the table rows.
fn family_display(family: &str) -> &'static str {
    match family {
        "qwen2.5" => "Qwen2.5",
        "qwen3" => "Qwen3",
        "llama-3.1" => "Llama-3.1",
        "llama-3.2" => "Llama-3.2",
        "llama-3-" => "Llama-3",
        "deepseek-llm" => "deepseek-llm",
        _ => "model",
    }
}

fn row_to_arch(row: &Row, known: bool) -> Arch {
    let (family, size, params, layers, hidden, kv_heads, head_dim, intermediate, vocab, tied) =
        *row;
    Arch {
        name: format!("{}-{}", family_display(family), size.to_uppercase()),
        params,
        layers,
        hidden,
        kv_heads,
        head_dim,
        intermediate,
        vocab,
        tied_embeddings: tied,
        known,
    }
}

fn size_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)(?:^|[^0-9.])(\d+(?:\.\d+)?)([bm])(?:[^a-z0-9]|$)").expect("valid regex")
    })
}

/// Parameter count parsed from a model name (`7B`, `1.5b`, `512M`), in parameters.
pub fn params_from_name(path: &str) -> Option<f64> {
    let base = path.rsplit('/').next().unwrap_or(path);
    let caps = size_regex().captures(base)?;
    let n: f64 = caps[1].parse().ok()?;
    let scale = if caps[2].eq_ignore_ascii_case("b") {
        1e9
    } else {
        1e6
    };
    let p = n * scale;
    (p > 0.0).then_some(p)
}

/// Architecture for a model path or Hugging Face id.
pub fn lookup(path: &str) -> Arch {
    let lower = path.to_ascii_lowercase();
    let base = lower.rsplit('/').next().unwrap_or(&lower).to_string();
    let size = params_from_name(&base);
    // Exact family + size match.
    for row in TABLE {
        let (family, label, ..) = row;
        if base.contains(family) {
            let label_params = params_from_name(label);
            if let (Some(a), Some(b)) = (size, label_params)
                && (a - b).abs() / b < 0.02
            {
                return row_to_arch(row, true);
            }
        }
    }
    match size {
        Some(p) => {
            // Nearest known Qwen2.5 shape by size, rescaled to the parsed count.
            let nearest = TABLE
                .iter()
                .filter(|r| r.0 == "qwen2.5")
                .min_by(|a, b| {
                    let da = (a.2.ln() - p.ln()).abs();
                    let db = (b.2.ln() - p.ln()).abs();
                    da.total_cmp(&db)
                })
                .expect("table has Qwen2.5 rows");
            let mut arch = row_to_arch(nearest, false);
            arch.name = format!("unknown ({:.2}B params, {}-like shape)", p / 1e9, arch.name);
            arch.params = p;
            arch
        }
        None => {
            let seven = TABLE
                .iter()
                .find(|r| r.0 == "qwen2.5" && r.1 == "7b")
                .expect("table has Qwen2.5-7B");
            let mut arch = row_to_arch(seven, false);
            arch.name = "unknown (no size in the name; assuming a Qwen2.5-7B-like model)".into();
            arch
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_resolve() {
        let q7 = lookup("Qwen/Qwen2.5-7B-Instruct");
        assert!(q7.known);
        assert_eq!(q7.name, "Qwen2.5-7B");
        assert_eq!(q7.vocab, 152_064);
        assert_eq!(q7.layers, 28);
        let q15 = lookup("Qwen/Qwen2.5-1.5B-Instruct");
        assert!(q15.known);
        assert_eq!(q15.hidden, 1536);
        assert_eq!(lookup("/models/Qwen2.5-Math-1.5B").name, "Qwen2.5-1.5B");
        assert_eq!(
            lookup("meta-llama/Llama-3.1-8B-Instruct").name,
            "Llama-3.1-8B"
        );
        assert_eq!(lookup("Qwen/Qwen3-8B").name, "Qwen3-8B");
        assert_eq!(lookup("Qwen/Qwen3-0.6B").layers, 28);
        assert_eq!(lookup("~/models/deepseek-llm-7b-chat").kv_heads, 32);
    }

    #[test]
    fn sizes_parse_from_names() {
        assert_eq!(params_from_name("Qwen2.5-7B-Instruct"), Some(7e9));
        assert_eq!(params_from_name("Qwen2.5-1.5B"), Some(1.5e9));
        assert_eq!(params_from_name("Llama-3.1-8B"), Some(8e9));
        assert_eq!(params_from_name("gsa-512m"), Some(512e6));
        assert_eq!(params_from_name("my-org/custom-13b-chat"), Some(13e9));
        assert_eq!(params_from_name("gpt2"), None);
    }

    #[test]
    fn unknown_models_fall_back() {
        let a = lookup("my-org/custom-13b");
        assert!(!a.known);
        assert!((a.params - 13e9).abs() < 1.0);
        assert_eq!(a.hidden, 5120); // nearest: Qwen2.5-14B
        let b = lookup("some/model");
        assert!(!b.known);
        assert_eq!(b.hidden, 3584);
    }

    #[test]
    fn kv_bytes_per_token_matches_config() {
        // Qwen2.5-7B: 2 (K,V) × 28 layers × 4 KV heads × 128 × 2 bytes = 57,344 B/token.
        let q7 = lookup("Qwen/Qwen2.5-7B-Instruct");
        assert_eq!(q7.kv_bytes_per_token(1), 57_344.0);
        assert_eq!(q7.kv_bytes_per_token(2), 28_672.0);
        // 8 ranks, 4 heads: each rank keeps a replicated head.
        assert_eq!(q7.kv_bytes_per_token(8), 14_336.0);
    }
}
