//! A decoder-only transformer's shape, as its Hugging Face `config.json` states it.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The keys of a Hugging Face `config.json` that decide memory. Other keys are ignored, so
/// a whole `config.json` deserialises into this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Architecture {
    pub hidden_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    /// Grouped-query attention: fewer K/V heads than query heads. Absent means as many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<u64>,
    /// Absent means `hidden_size / num_attention_heads` (Qwen3 and Llama 3.2 1B set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    /// Input embedding and LM head share one matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Biases on the Q, K and V projections. Absent means the family's convention: Qwen2
    /// (and Qwen2.5) have them without saying so in `config.json`; Llama says `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// A mixture of experts' keys; all absent in a dense model.
    #[serde(flatten)]
    pub moe: MoeKeys,
}

/// The `config.json` keys of a sparse mixture-of-experts decoder, as Hugging Face's Qwen2-MoE,
/// Qwen3-MoE, OLMoE and Mixtral write them (`transformers/models/*/configuration_*.py`).
/// Every layer's MLP is then `num_experts` gated MLPs of `moe_intermediate_size`, a router
/// (`hidden_size × num_experts`) and, in Qwen2-MoE, a shared expert every token passes through.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MoeKeys {
    /// Routed experts per sparse layer (`num_experts`; Mixtral's `num_local_experts`).
    #[serde(
        default,
        alias = "num_local_experts",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_experts: Option<u64>,
    /// Experts each token is routed to (top-k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<u64>,
    /// One expert's MLP width. Absent: `intermediate_size` (Mixtral's experts use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<u64>,
    /// Qwen2-MoE's shared expert (with its one-unit sigmoid gate). Absent or 0: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_intermediate_size: Option<u64>,
    /// Qwen2-MoE/Qwen3-MoE: layers that keep a dense MLP of `intermediate_size`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mlp_only_layers: Vec<u64>,
    /// Qwen2-MoE/Qwen3-MoE: every `decoder_sparse_step`-th layer is sparse (1: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_sparse_step: Option<u64>,
}

/// Why an architecture cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ArchError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is not a model config.json: {message}")]
    Parse { path: String, message: String },
    /// Not a regular file, or past the input limit.
    #[error("{0}")]
    Input(crate::input::InputError),
    #[error("architecture key `{key}` must be a positive number")]
    NotPositive { key: &'static str },
    #[error("architecture key `{key}` is missing (the other keys of the shape are given)")]
    Missing { key: &'static str },
    #[error(
        "architecture key `{key}` is {value}: larger than any model's (at most {max}); check for a typo"
    )]
    TooLarge {
        key: &'static str,
        value: u64,
        max: u64,
    },
    #[error(
        "architecture: num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv})"
    )]
    Heads { heads: u64, kv: u64 },
    #[error("architecture: num_experts_per_tok ({k}) must be at most num_experts ({experts})")]
    TopK { k: u64, experts: u64 },
    #[error(
        "{path}: `{key}` marks {what}, a shape orch's memory model does not cover{}",
        params.map_or(String::new(), |p| format!(" (its keys count {:.1}B parameters)", p / 1e9))
    )]
    Unsupported {
        path: String,
        key: &'static str,
        what: &'static str,
        /// Its parameters where its keys can be counted (DeepSeek-V2/V3's, gpt-oss's), for a
        /// stand-in of its size.
        params: Option<f64>,
    },
}

/// `config.json` keys of architectures whose shape the keys above cannot state, each with what
/// it marks: DeepSeek-V2/V3's multi-head latent attention and routed experts (with dense first
/// layers and shared experts of their own; also GLM-4.5's and Kimi-K2's), Qwen3-Next's
/// linear-attention layers (no KV cache of the full-attention kind; `Qwen3NextConfig`),
/// Jamba's Mamba layers and experts every other layer, ERNIE-4.5's experts under names of its
/// own, Llama 4's interleaved experts.
const UNSUPPORTED_KEYS: [(&str, &str); 6] = [
    (
        "kv_lora_rank",
        "multi-head latent attention (DeepSeek-V2/V3)",
    ),
    ("n_routed_experts", "DeepSeek-V2/V3's mixture of experts"),
    (
        "linear_num_value_heads",
        "linear-attention layers (Qwen3-Next's hybrid attention)",
    ),
    (
        "expert_layer_period",
        "Jamba's Mamba layers and periodic experts",
    ),
    ("moe_num_experts", "ERNIE-4.5's mixture of experts"),
    (
        "interleave_moe_layer_step",
        "Llama 4's interleaved mixture of experts",
    ),
];

/// `model_type`s whose keys read as a supported shape's but whose memory is not it: gpt-oss
/// (`num_local_experts` as Mixtral's, but MXFP4 experts in vLLM, attention sinks, sliding
/// windows on every other layer).
const UNSUPPORTED_MODEL_TYPES: [(&str, &str); 1] = [(
    "gpt_oss",
    "gpt-oss's MXFP4 experts and alternating sliding-window attention",
)];

/// DeepSeek-V2/V3's parameters from their `config.json` keys (`DeepseekV3Config`; GLM-4.5 and
/// Kimi-K2 use the same): multi-head latent attention (Q through `q_lora_rank` when set, K and
/// V through `kv_lora_rank`, a rotary part of `qk_rope_head_dim`), `first_k_dense_replace`
/// dense layers, then routed experts with `n_shared_experts` shared ones and a router, the
/// embedding and the LM head. DeepSeek-V3 comes to 671B, V2-Lite to 15.7B, as published.
/// `None` when a key it needs is missing.
fn deepseek_params(v: &serde_json::Value) -> Option<f64> {
    let n = |key: &str| v.get(key).and_then(|x| x.as_f64());
    let (h, layers, heads, vocab) = (
        n("hidden_size")?,
        n("num_hidden_layers")?,
        n("num_attention_heads")?,
        n("vocab_size")?,
    );
    let (nope, rope, v_dim) = (
        n("qk_nope_head_dim")?,
        n("qk_rope_head_dim")?,
        n("v_head_dim")?,
    );
    let kv_lora = n("kv_lora_rank")?;
    let q = match n("q_lora_rank") {
        Some(r) => h * r + r + r * heads * (nope + rope),
        None => h * heads * (nope + rope),
    };
    let attention =
        q + h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim) + heads * v_dim * h;
    let dense_layers = n("first_k_dense_replace").unwrap_or(0.0).min(layers);
    let dense_mlp = 3.0 * h * n("intermediate_size")?;
    let experts = n("n_routed_experts")?;
    let expert = 3.0 * h * n("moe_intermediate_size")?;
    let moe_mlp = (experts + n("n_shared_experts").unwrap_or(0.0)) * expert + h * experts;
    let tied = v.get("tie_word_embeddings").and_then(|x| x.as_bool()) == Some(true);
    let heads_out = if tied { 1.0 } else { 2.0 };
    Some(
        layers * (attention + 2.0 * h)
            + dense_layers * dense_mlp
            + (layers - dense_layers) * moe_mlp
            + heads_out * vocab * h
            + h,
    )
}

/// The largest size any one architecture key may have: far above every real model's (a
/// vocabulary of 256k, 126 layers, a hidden size of 16k), and small enough that products of
/// them stay exact in `f64` and fit the estimator's `u32` fields.
pub const MAX_DIMENSION: u64 = 1 << 24;

impl Architecture {
    /// Read a `config.json` (or a directory holding one).
    pub fn from_config_file(path: &Path) -> Result<Architecture, ArchError> {
        let file = if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        };
        let shown = file.display().to_string();
        // A regular file within the limit: `model.config=/dev/zero` or a FIFO is refused by name.
        let text = crate::input::read_config_text(&file).map_err(|e| match e.kind {
            crate::input::InputErrorKind::Io(error) => ArchError::Read {
                path: shown.clone(),
                error,
            },
            _ => ArchError::Input(e),
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ArchError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?;
        let model_type = value.get("model_type").and_then(|v| v.as_str());
        if let Some((key, what)) = UNSUPPORTED_KEYS
            .into_iter()
            .find(|(key, _)| value.get(key).is_some_and(|v| !v.is_null()))
            .or_else(|| {
                UNSUPPORTED_MODEL_TYPES
                    .into_iter()
                    .find(|(t, _)| model_type == Some(*t))
                    .map(|(_, what)| ("model_type", what))
            })
        {
            let params = match key {
                "kv_lora_rank" | "n_routed_experts" => deepseek_params(&value),
                // gpt-oss's weights count as Mixtral-style experts (their biases aside).
                "model_type" => serde_json::from_value::<Architecture>(value.clone())
                    .ok()
                    .filter(|a| a.validate().is_ok())
                    .map(|a| a.params()),
                _ => None,
            };
            return Err(ArchError::Unsupported {
                path: shown,
                key,
                what,
                params,
            });
        }
        let arch: Architecture = serde_json::from_value(value).map_err(|e| ArchError::Parse {
            path: shown,
            message: e.to_string(),
        })?;
        arch.validate()?;
        Ok(arch)
    }

    /// Check the numbers make a model: every size positive, heads grouped evenly.
    pub fn validate(&self) -> Result<(), ArchError> {
        for (key, v) in [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("num_key_value_heads", self.num_key_value_heads.unwrap_or(1)),
            ("head_dim", self.head_dim.unwrap_or(1)),
            (
                "num_experts_per_tok",
                self.moe.num_experts_per_tok.unwrap_or(1),
            ),
            (
                "moe_intermediate_size",
                self.moe.moe_intermediate_size.unwrap_or(1),
            ),
            (
                "decoder_sparse_step",
                self.moe.decoder_sparse_step.unwrap_or(1),
            ),
        ] {
            if v == 0 {
                return Err(ArchError::NotPositive { key });
            }
            if v > MAX_DIMENSION {
                return Err(ArchError::TooLarge {
                    key,
                    value: v,
                    max: MAX_DIMENSION,
                });
            }
        }
        if let Some(experts) = self.experts() {
            if experts > MAX_DIMENSION {
                return Err(ArchError::TooLarge {
                    key: "num_experts",
                    value: experts,
                    max: MAX_DIMENSION,
                });
            }
            // Hugging Face's configs default it per family (2, 4, 8): a shape that names
            // experts must say how many a token takes.
            if self.moe.num_experts_per_tok.is_none() {
                return Err(ArchError::Missing {
                    key: "num_experts_per_tok",
                });
            }
            let k = self.top_k();
            if k > experts {
                return Err(ArchError::TopK { k, experts });
            }
        }
        let kv = self.kv_heads();
        if !self.num_attention_heads.is_multiple_of(kv) {
            return Err(ArchError::Heads {
                heads: self.num_attention_heads,
                kv,
            });
        }
        Ok(())
    }

    /// Key/value heads (as many as query heads without grouped-query attention).
    pub fn kv_heads(&self) -> u64 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Size of one attention head.
    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Parameters of one embedding matrix (vocabulary × hidden).
    pub fn embedding_params(&self) -> f64 {
        self.vocab_size as f64 * self.hidden_size as f64
    }

    /// Q, K and V projections carry biases.
    pub fn has_qkv_bias(&self) -> bool {
        self.attention_bias
            .unwrap_or(self.model_type.as_deref() == Some("qwen2"))
    }

    /// Routed experts per sparse layer (`None`: a dense model, as `num_experts: 0` is in Hugging
    /// Face's Qwen2-MoE and Qwen3-MoE).
    pub fn experts(&self) -> Option<u64> {
        self.moe.num_experts.filter(|&e| e > 0)
    }

    /// Experts a token passes through in a sparse layer (top-k; a mixture of experts must state
    /// it, [`Architecture::validate`]; a dense model's 1 MLP).
    pub fn top_k(&self) -> u64 {
        self.moe.num_experts_per_tok.unwrap_or(1).max(1)
    }

    /// One routed expert's MLP width.
    pub fn expert_intermediate(&self) -> u64 {
        self.moe
            .moe_intermediate_size
            .unwrap_or(self.intermediate_size)
    }

    /// Layers whose MLP is a mixture of experts: Qwen2-MoE's rule (`modeling_qwen2_moe.py`
    /// `Qwen2MoeDecoderLayer.__init__`: not in `mlp_only_layers`, and `(i + 1)` a multiple of
    /// `decoder_sparse_step`); every layer in Mixtral and OLMoE; none in a dense model.
    pub fn sparse_layers(&self) -> u64 {
        if self.experts().is_none() {
            return 0;
        }
        let step = self.moe.decoder_sparse_step.unwrap_or(1).max(1);
        (0..self.num_hidden_layers)
            .filter(|i| !self.moe.mlp_only_layers.contains(i) && (i + 1).is_multiple_of(step))
            .count() as u64
    }

    /// Parameters of one sparse layer's MLP: the experts' gated MLPs, the router, and the
    /// shared expert with its one-unit gate.
    fn sparse_mlp_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        let experts = self.experts().unwrap_or(0) as f64;
        let shared = self.moe.shared_expert_intermediate_size.unwrap_or(0) as f64;
        let shared = if shared > 0.0 {
            3.0 * h * shared + h
        } else {
            0.0
        };
        experts * 3.0 * h * self.expert_intermediate() as f64 + h * experts + shared
    }

    /// MLP units a token passes through, averaged over the layers: the dense MLP's width, or in
    /// a sparse layer its top-k experts' widths and the shared expert's. Activations scale
    /// with it as with a dense model's `intermediate_size`.
    pub fn mlp_units_per_token(&self) -> f64 {
        let layers = self.num_hidden_layers as f64;
        let sparse = self.sparse_layers() as f64;
        let sparse_units = (self.top_k() * self.expert_intermediate()
            + self.moe.shared_expert_intermediate_size.unwrap_or(0))
            as f64;
        (sparse * sparse_units + (layers - sparse) * self.intermediate_size as f64) / layers
    }

    /// Share of the layers that are sparse (0 for a dense model).
    pub fn sparse_share(&self) -> f64 {
        self.sparse_layers() as f64 / self.num_hidden_layers as f64
    }

    /// Parameters of one decoder layer: attention (Q, K, V, O projections, with Qwen2's QKV
    /// biases), a gated MLP (gate, up, down: the SwiGLU of Llama, Qwen and Mistral) and two
    /// RMSNorms. Qwen2.5-7B comes to 7,615,616,512, its published count exactly. A mixture of
    /// experts' layers are averaged: the sparse ones hold every expert (see
    /// [`Architecture::sparse_layers`]).
    pub fn layer_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        let q = self.num_attention_heads as f64 * self.head_dim() as f64;
        let kv = self.kv_heads() as f64 * self.head_dim() as f64;
        let bias = if self.has_qkv_bias() {
            q + 2.0 * kv
        } else {
            0.0
        };
        let attention = h * q + 2.0 * h * kv + q * h + bias;
        let dense = 3.0 * h * self.intermediate_size as f64;
        let share = self.sparse_share();
        let mlp = share * self.sparse_mlp_params() + (1.0 - share) * dense;
        attention + mlp + 2.0 * h
    }

    /// Parameters one token's forward uses: every layer's attention, its top-k experts and
    /// the shared expert (not the other experts), the embedding and the LM head.
    pub fn active_params(&self) -> f64 {
        let h = self.hidden_size as f64;
        let inactive = self.experts().map_or(0.0, |e| {
            e.saturating_sub(self.top_k()) as f64 * 3.0 * h * self.expert_intermediate() as f64
        });
        self.params() - self.sparse_layers() as f64 * inactive
    }

    /// Total parameters: layers, the embedding, the LM head unless tied, the final norm.
    pub fn params(&self) -> f64 {
        let heads = if self.tie_word_embeddings { 1.0 } else { 2.0 };
        self.num_hidden_layers as f64 * self.layer_params()
            + heads * self.embedding_params()
            + self.hidden_size as f64
    }

    /// Bytes of K and V cache per token on one GPU, for `bytes_per_value` (2 for bf16) and
    /// tensor parallelism `tp`: layers × 2 × KV heads × head dim × bytes. KV heads are split
    /// over TP ranks, and replicated when there are fewer heads than ranks (vLLM, SGLang).
    pub fn kv_cache_bytes_per_token(&self, bytes_per_value: f64, tp: u64) -> f64 {
        let heads_per_gpu = self.kv_heads().div_ceil(tp.max(1)).max(1);
        self.num_hidden_layers as f64
            * 2.0
            * heads_per_gpu as f64
            * self.head_dim() as f64
            * bytes_per_value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen25_7b() -> Architecture {
        serde_json::from_str(
            r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
                "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
                "vocab_size": 152064, "tie_word_embeddings": false, "model_type": "qwen2",
                "rope_theta": 1000000.0, "torch_dtype": "bfloat16"}"#,
        )
        .unwrap()
    }

    #[test]
    fn parameter_counts_match_the_model_cards() {
        // Published: Qwen2.5-7B 7.61B, Llama-3.1-8B 8.03B, Qwen2.5-0.5B 0.49B.
        let q7 = qwen25_7b();
        assert_eq!(q7.params(), 7_615_616_512.0);
        let llama = Architecture {
            hidden_size: 4096,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: Some(8),
            head_dim: None,
            intermediate_size: 14336,
            vocab_size: 128_256,
            tie_word_embeddings: false,
            model_type: None,
            attention_bias: None,
            moe: MoeKeys::default(),
        };
        assert!(
            (llama.params() / 1e9 - 8.03).abs() < 0.02,
            "{}",
            llama.params()
        );
    }

    #[test]
    fn kv_cache_per_token() {
        // 28 layers × 2 × 4 heads × 128 × 2 bytes = 57,344 B/token; TP 2 halves it; TP 8
        // replicates one head per rank.
        let q7 = qwen25_7b();
        assert_eq!(q7.kv_cache_bytes_per_token(2.0, 1), 57_344.0);
        assert_eq!(q7.kv_cache_bytes_per_token(2.0, 2), 28_672.0);
        assert_eq!(q7.kv_cache_bytes_per_token(2.0, 8), 14_336.0);
    }

    #[test]
    fn config_json_files_and_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            serde_json::to_string(&qwen25_7b()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            Architecture::from_config_file(dir.path()).unwrap(),
            qwen25_7b()
        );
        std::fs::write(dir.path().join("bad.json"), r#"{"hidden_size": 8}"#).unwrap();
        let err = Architecture::from_config_file(&dir.path().join("bad.json")).unwrap_err();
        assert!(err.to_string().contains("bad.json"), "{err}");
        let mut zero = qwen25_7b();
        zero.num_hidden_layers = 0;
        assert!(zero.validate().is_err());
        let mut uneven = qwen25_7b();
        uneven.num_key_value_heads = Some(5);
        assert!(uneven.validate().is_err());
    }

    /// Mixtral's `num_local_experts` is read as `num_experts`; DeepSeek-V2/V3's keys, whose
    /// attention and experts these keys cannot state, are refused with the key named.
    #[test]
    fn mixture_of_experts_config_json() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let mixtral = write(
            "mixtral.json",
            r#"{"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
                "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000, "tie_word_embeddings": false, "model_type": "mixtral"}"#,
        );
        let a = Architecture::from_config_file(&mixtral).unwrap();
        assert_eq!(
            (a.experts(), a.top_k(), a.expert_intermediate()),
            (Some(8), 2, 14336)
        );
        assert_eq!(a.sparse_layers(), 32);
        assert_eq!(a.mlp_units_per_token(), 2.0 * 14336.0);
        // Dense layers named by mlp_only_layers keep intermediate_size.
        let mut mixed = a.clone();
        mixed.moe.mlp_only_layers = vec![0, 1];
        assert_eq!(mixed.sparse_layers(), 30);
        assert!(mixed.params() < a.params());
        let deepseek = write(
            "deepseek.json",
            r#"{"hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
                "intermediate_size": 10944, "vocab_size": 102400, "kv_lora_rank": 512,
                "n_routed_experts": 64, "num_experts_per_tok": 6}"#,
        );
        let err = Architecture::from_config_file(&deepseek)
            .unwrap_err()
            .to_string();
        // Counted from the keys where they are all there: DeepSeek-V3 (671B) and V2-Lite
        // (15.7B), their config.json's keys (deepseek-ai/DeepSeek-V3, DeepSeek-V2-Lite).
        let v3 = serde_json::json!({"hidden_size": 7168, "num_hidden_layers": 61,
            "num_attention_heads": 128, "vocab_size": 129280, "q_lora_rank": 1536,
            "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
            "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3,
            "tie_word_embeddings": false});
        let p = deepseek_params(&v3).unwrap() / 1e9;
        assert!((p / 671.0 - 1.0).abs() < 0.02, "{p}");
        let lite = serde_json::json!({"hidden_size": 2048, "num_hidden_layers": 27,
            "num_attention_heads": 16, "vocab_size": 102400, "q_lora_rank": null,
            "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "n_routed_experts": 64, "n_shared_experts": 2, "first_k_dense_replace": 1});
        let p = deepseek_params(&lite).unwrap() / 1e9;
        assert!((p / 15.7 - 1.0).abs() < 0.02, "{p}");
        assert!(
            err.contains("kv_lora_rank") && err.contains("deepseek.json"),
            "{err}"
        );
        // gpt-oss reads as Mixtral's keys but is not its memory: refused by its model_type.
        let gpt_oss = write(
            "gpt-oss.json",
            r#"{"hidden_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
                "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
                "model_type": "gpt_oss"}"#,
        );
        let err = Architecture::from_config_file(&gpt_oss)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("model_type") && err.contains("gpt-oss"),
            "{err}"
        );
        // `num_experts: 0` is a dense model; experts without their top-k are not a shape.
        let mut none = a.clone();
        none.moe.num_experts = Some(0);
        assert!(none.validate().is_ok() && none.experts().is_none());
        assert_eq!(none.sparse_layers(), 0);
        let mut untold = a.clone();
        untold.moe.num_experts_per_tok = None;
        assert!(
            untold
                .validate()
                .unwrap_err()
                .to_string()
                .contains("num_experts_per_tok")
        );
        let mut top = a;
        top.moe.num_experts_per_tok = Some(9);
        assert!(
            top.validate()
                .unwrap_err()
                .to_string()
                .contains("num_experts_per_tok")
        );
    }
}
