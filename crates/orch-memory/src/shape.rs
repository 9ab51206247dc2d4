//! The model shape the estimator computes with: an [`Architecture`] reduced to what memory
//! depends on, with a name and whether it is the model itself or a stand-in.
//!
//! Known models come from orch's model table (`models/*.yaml`). For the simulator, which must
//! simulate something, unknown names fall back to the known shape nearest in size (size parsed from the name, e.g.
//! `my-org/custom-13b`), or to a Qwen2.5-7B-like shape when the name carries no size.

use crate::arch::Architecture;
use crate::table::{ModelTable, params_from_name};

/// A mixture of experts' routing, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moe {
    /// Routed experts per sparse layer.
    pub experts: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// One expert's MLP width.
    pub expert_intermediate: u32,
    /// The shared expert's width (0: none).
    pub shared_intermediate: u32,
    /// The dense layers' MLP width (`intermediate_size`).
    pub dense_intermediate: u32,
    /// Share of the layers that are sparse.
    pub sparse_share: f64,
    /// Parameters one token's forward uses.
    pub active_params: f64,
}

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
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (GQA).
    pub kv_heads: u32,
    /// Per-head dimension.
    pub head_dim: u32,
    /// MLP units a token passes through: a dense model's intermediate size; in a mixture of
    /// experts its top-k experts' widths and the shared expert's, averaged over the layers
    /// ([`Architecture::mlp_units_per_token`]). Activations scale with it.
    pub intermediate: u32,
    /// A mixture of experts' routing (`None` for a dense model).
    pub moe: Option<Moe>,
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

impl Arch {
    /// The shape of a known architecture (`known`: it is the model itself, not a stand-in).
    pub fn from_architecture(name: &str, a: &Architecture, known: bool) -> Arch {
        Arch {
            name: name.to_string(),
            params: a.params(),
            layers: a.num_hidden_layers as u32,
            hidden: a.hidden_size as u32,
            heads: a.num_attention_heads as u32,
            kv_heads: a.kv_heads() as u32,
            head_dim: a.head_dim() as u32,
            intermediate: a.mlp_units_per_token().round() as u32,
            moe: a.experts().map(|experts| Moe {
                experts: experts as u32,
                top_k: a.top_k() as u32,
                expert_intermediate: a.expert_intermediate() as u32,
                shared_intermediate: a.moe.shared_expert_intermediate_size.unwrap_or(0) as u32,
                dense_intermediate: a.intermediate_size as u32,
                sparse_share: a.sparse_share(),
                active_params: a.active_params(),
            }),
            vocab: a.vocab_size as u32,
            tied_embeddings: a.tie_word_embeddings,
            known,
        }
    }
}

/// Is `model` (a path or Hugging Face id) a vision-language model, by the words their names
/// carry (`Qwen2.5-VL-3B-Instruct`, `llava-v1.6`, `InternVL2-8B`, `MiniCPM-V-2_6`,
/// `Llama-3.2-11B-Vision`, `pixtral`, `idefics2`, `paligemma`, `-Omni`)? orch sizes the text
/// decoder only: the vision tower's weights and activations and the image tokens per sample
/// are not counted, which the estimate must say.
pub fn vision_language(model: &str) -> bool {
    static WORDS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)(?:^|[-_.])(?:vl|vlm|vision|llava|internvl\d*|minicpm-v|minicpm-o|pixtral|idefics\d*|paligemma\d*|omni|cogvlm\d*|glm-?4v|molmo|smolvlm|florence-?\d*)(?:$|[-_.\d])",
        )
        .expect("vision-language words")
    });
    let base = model
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(model);
    WORDS.is_match(base)
}

/// The note an estimate of a vision-language model carries.
pub fn vision_language_note(model: &str) -> String {
    format!(
        "{model} is a vision-language model: only its text decoder is sized here; the vision tower's weights and activations and the image tokens per sample are not counted, so the real peak is higher than this estimate"
    )
}

/// The family unknown models are approximated by.
const STAND_IN_FAMILY: &str = "Qwen2.5";

/// Architecture for a model path or Hugging Face id, from orch's model table; a stand-in
/// shape when the table does not know it.
pub fn lookup(path: &str) -> Arch {
    lookup_in(ModelTable::current(), path)
}

/// [`lookup`] in a given table.
pub fn lookup_in(table: &ModelTable, path: &str) -> Arch {
    match table.lookup(path) {
        Some(m) => Arch::from_architecture(&m.name, &m.arch, true),
        None => stand_in_from(table, path),
    }
}

/// The stand-in shape for a model of `path`'s size (parsed from its name), whatever the table
/// knows of the model itself: what orch assumes when told the architecture is unknown.
pub fn stand_in(path: &str) -> Arch {
    stand_in_from(ModelTable::builtin(), path)
}

/// The stand-in shape for a model of `params` parameters, however its size is known (a
/// `config.json` of a shape orch does not model counts it).
pub fn stand_in_of_size(path: &str, params: f64) -> Arch {
    stand_in_sized(ModelTable::builtin(), Some(params)).unwrap_or_else(|| stand_in(path))
}

fn stand_in_from(table: &ModelTable, path: &str) -> Arch {
    let base = path.rsplit('/').next().unwrap_or(path);
    stand_in_sized(table, params_from_name(base)).unwrap_or_else(|| {
        let sizes = table.family(STAND_IN_FAMILY);
        let (label, a) = sizes
            .iter()
            .find(|(l, _)| l.as_str() == "7B")
            .expect("the model table has the stand-in family's 7B");
        let mut arch = Arch::from_architecture(&format!("{STAND_IN_FAMILY}-{label}"), a, false);
        arch.name = "unknown (no size in the name; assuming a Qwen2.5-7B-like model)".into();
        arch
    })
}

/// The nearest stand-in shape by size, rescaled to `params`; `None` without a size.
fn stand_in_sized(table: &ModelTable, params: Option<f64>) -> Option<Arch> {
    let sizes = table.family(STAND_IN_FAMILY);
    let p = params.filter(|p| *p > 0.0)?;
    let (label, a) = sizes
        .iter()
        .min_by(|x, y| {
            let dx = (x.1.params().ln() - p.ln()).abs();
            let dy = (y.1.params().ln() - p.ln()).abs();
            dx.total_cmp(&dy)
        })
        .expect("the model table has the stand-in family");
    let mut arch = Arch::from_architecture(&format!("{STAND_IN_FAMILY}-{label}"), a, false);
    arch.name = format!("unknown ({:.2}B params, {}-like shape)", p / 1e9, arch.name);
    arch.params = p;
    Some(arch)
}

#[cfg(test)]
mod tests {
    #[test]
    fn vision_language_models_are_known_by_their_names() {
        for vlm in [
            "Qwen/Qwen2.5-VL-3B-Instruct",
            "Qwen/Qwen2-VL-7B",
            "llava-hf/llava-v1.6-mistral-7b-hf",
            "OpenGVLab/InternVL2-8B",
            "openbmb/MiniCPM-V-2_6",
            "meta-llama/Llama-3.2-11B-Vision-Instruct",
            "mistralai/Pixtral-12B-2409",
            "HuggingFaceM4/idefics2-8b",
            "google/paligemma-3b-pt-224",
            "Qwen/Qwen2.5-Omni-7B",
        ] {
            assert!(super::vision_language(vlm), "{vlm}");
        }
        for text in [
            "Qwen/Qwen2.5-7B-Instruct",
            "meta-llama/Llama-3.1-8B",
            "deepseek-ai/deepseek-llm-7b-chat",
            "/models/evolve-7b",
            "Qwen/Qwen3-30B-A3B-Base",
            "mistralai/Mixtral-8x7B-v0.1",
        ] {
            assert!(!super::vision_language(text), "{text}");
        }
    }

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
        // A mixture of experts: a token passes through 8 experts of 768 units, so its
        // activations are a 6144-unit MLP's; FSDP's unit is a layer with all 128 experts.
        let moe = lookup("Qwen/Qwen3-30B-A3B-Base");
        assert!(moe.known);
        assert_eq!(moe.intermediate, 8 * 768);
        let routing = moe.moe.expect("a mixture of experts");
        assert_eq!((routing.experts, routing.top_k), (128, 8));
        assert!(
            (moe.layer_params() / 1e6 - 622.9).abs() < 1.0,
            "{}",
            moe.layer_params()
        );
        // Qwen1.5-MoE's shared expert adds its width to every token's.
        assert_eq!(
            lookup("Qwen/Qwen1.5-MoE-A2.7B").intermediate,
            4 * 1408 + 5632
        );
        assert!(lookup("Qwen/Qwen2.5-7B").moe.is_none());
    }

    #[test]
    fn sizes_parse_from_names() {
        assert_eq!(params_from_name("Qwen2.5-7B-Instruct"), Some(7e9));
        assert_eq!(params_from_name("Qwen2.5-1.5B"), Some(1.5e9));
        assert_eq!(params_from_name("Llama-3.1-8B"), Some(8e9));
        assert_eq!(params_from_name("gsa-512m"), Some(512e6));
        assert_eq!(params_from_name("my-org/custom-13b-chat"), Some(13e9));
        assert_eq!(params_from_name("gpt2"), None);
        // A mixture of experts' total comes first; Mixtral's 8x7B counts 8 × 7B.
        assert_eq!(params_from_name("Qwen3-30B-A3B-Base"), Some(30e9));
        assert_eq!(params_from_name("Mixtral-8x7B-Instruct-v0.1"), Some(56e9));
        assert_eq!(params_from_name("my-moe-4x1.5b"), Some(6e9));
    }

    #[test]
    fn unknown_models_fall_back() {
        let a = lookup("my-org/custom-13b");
        assert!(!a.known);
        assert!((a.params - 13e9).abs() < 1.0);
        assert_eq!(a.hidden, 5120); // nearest: Qwen2.5-14B
        // A mixture of experts the table lacks is sized by its name's total, never its
        // active count (a dense stand-in: its activations are over-counted, not its weights).
        let m = lookup("my-org/custom-moe-16x3B");
        assert!(!m.known);
        assert_eq!(m.params, 48e9);
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
