//! LoRA adapters as PEFT builds them: which of a decoder's projections carry one, and how many
//! parameters they add. A LoRA run trains only these: its gradients and AdamW state are the
//! adapters', not the model's.
//!
//! PEFT's `LoraConfig.target_modules` (peft `tuners/tuners_utils.py`, `check_target_module_exists`
//! and `_maybe_include_all_linear_layers`): `all-linear` is every `nn.Linear` but the output
//! layer; a list matches a module whose full name is an entry or ends in `.` + an entry; any
//! other string is a regular expression the whole module name must match. `exclude_modules`
//! takes the same forms and wins. Each adapted `in × out` projection gains `A` (`r × in`) and `B`
//! (`out × r`): `r × (in + out)` parameters. Names are matched against each layer's modules as a
//! Hugging Face Llama/Qwen/Mistral decoder names them (`model.layers.<i>.self_attn.q_proj`).

use crate::shape::Arch;
use regex::Regex;

/// One of a decoder layer's linear projections (Llama/Qwen/Mistral names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Proj {
    const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::O,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
    ];

    fn name(self) -> &'static str {
        match self {
            Proj::Q => "q_proj",
            Proj::K => "k_proj",
            Proj::V => "v_proj",
            Proj::O => "o_proj",
            Proj::Gate => "gate_proj",
            Proj::Up => "up_proj",
            Proj::Down => "down_proj",
        }
    }

    /// The module's full name in layer `layer` of a Hugging Face decoder.
    fn path(self, layer: u32) -> String {
        let block = match self {
            Proj::Q | Proj::K | Proj::V | Proj::O => "self_attn",
            _ => "mlp",
        };
        format!("model.layers.{layer}.{block}.{}", self.name())
    }

    /// `in + out` of the projection: the query's output and the output projection's input
    /// are heads × head_dim (the hidden size in Llama, Qwen2.5 and Mistral, not in Qwen3).
    /// In a mixture of experts, PEFT's: every expert's (below).
    fn in_plus_out(self, a: &Arch) -> f64 {
        self.widths(a, true)
    }

    /// [`Proj::in_plus_out`] as vLLM's LoRA layers wrap it: the attention's and a dense MLP's
    /// projections; of a mixture of experts' MLP, the shared expert's only (vLLM's fused-MoE
    /// experts take no adapter in the releases verl runs).
    fn vllm_in_plus_out(self, a: &Arch) -> f64 {
        self.widths(a, false)
    }

    fn widths(self, a: &Arch, experts_adapted: bool) -> f64 {
        let h = a.hidden as f64;
        let q = a.heads as f64 * a.head_dim as f64;
        let kv = a.kv_heads as f64 * a.head_dim as f64;
        match self {
            Proj::Q | Proj::O => h + q,
            Proj::K | Proj::V => h + kv,
            Proj::Gate | Proj::Up | Proj::Down => match a.moe {
                None => h + a.intermediate as f64,
                // Every expert's projection of that name carries an adapter (Hugging Face's
                // MoE blocks of transformers 4.x hold each expert as an MLP of `nn.Linear`s,
                // `mlp.experts.N.gate_proj`), and the shared expert's; averaged over the layers.
                Some(m) => {
                    let shared = match m.shared_intermediate {
                        0 => 0.0,
                        s => h + f64::from(s),
                    };
                    let routed = if experts_adapted {
                        f64::from(m.experts)
                    } else {
                        0.0
                    };
                    let sparse = routed * (h + f64::from(m.expert_intermediate));
                    let dense = h + f64::from(m.dense_intermediate);
                    m.sparse_share * (sparse + shared) + (1.0 - m.sparse_share) * dense
                }
            },
        }
    }
}

/// A `target_modules` / `exclude_modules` value as PEFT reads it.
#[derive(Debug, Clone)]
enum Selector {
    AllLinear,
    /// Module names or name suffixes.
    Names(Vec<String>),
    /// A regular expression over the whole module name.
    Pattern(Regex),
}

impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::AllLinear, Self::AllLinear) => true,
            (Self::Names(a), Self::Names(b)) => a == b,
            (Self::Pattern(a), Self::Pattern(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Selector {
    /// From a value as orch keeps it: `all-linear`, a list (JSON from YAML, or Hydra's
    /// `[q_proj,v_proj]`), or a regular expression. Err: a pattern Rust's regex crate cannot
    /// read (Python-only syntax such as look-arounds).
    fn parse(value: &str) -> Result<Self, String> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("all-linear") {
            return Ok(Self::AllLinear);
        }
        if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            return Ok(Self::Names(
                inner
                    .split(',')
                    .map(|s| s.trim().trim_matches(['"', '\'']).to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ));
        }
        Regex::new(&format!("^(?:{value})$"))
            .map(Self::Pattern)
            .map_err(|_| value.to_string())
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Self::AllLinear => true,
            Self::Names(names) => names
                .iter()
                .any(|n| path == n || path.ends_with(&format!(".{n}"))),
            Self::Pattern(re) => re.is_match(path),
        }
    }
}

/// How many layers' module names are matched one by one (real decoders have at most a few
/// hundred).
const MATCHED_LAYERS: u32 = 1024;

/// A LoRA configuration: its rank and the projections it adapts.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    pub rank: u64,
    targets: Selector,
    exclude: Option<Selector>,
    /// What orch could not read or count, for notes.
    pub notes: Vec<String>,
}

impl Lora {
    /// From the rank and PEFT's two keys (`target_modules` default `all-linear`, verl's).
    pub fn new(rank: u64, target_modules: Option<&str>, exclude_modules: Option<&str>) -> Self {
        let mut notes = Vec::new();
        let targets = match Selector::parse(target_modules.unwrap_or("all-linear")) {
            Ok(s) => s,
            Err(v) => {
                notes.push(format!(
                    "LoRA target_modules {v:?} is a regular expression orch cannot read: every projection is counted"
                ));
                Selector::AllLinear
            }
        };
        if let Selector::Names(names) = &targets {
            if names.is_empty() {
                notes.push(
                    "LoRA target_modules is empty: PEFT refuses it (no module to adapt)".into(),
                );
            }
            let unknown: Vec<&str> = names
                .iter()
                .filter(|n| {
                    !Proj::ALL.iter().any(|p| {
                        let path = p.path(0);
                        *n == &path
                            || path.ends_with(&format!(".{n}"))
                            || n.starts_with("model.layers.")
                    })
                })
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                notes.push(format!(
                    "LoRA target_modules {}: not a decoder projection orch counts adapters for",
                    unknown.join(", ")
                ));
            }
        }
        let exclude = exclude_modules.and_then(|e| match Selector::parse(e) {
            Ok(s) => Some(s),
            Err(v) => {
                notes.push(format!(
                    "LoRA exclude_modules {v:?} is a regular expression orch cannot read: nothing is excluded"
                ));
                None
            }
        });
        Self {
            rank,
            targets,
            exclude,
            notes,
        }
    }

    /// Whether `proj` of layer `layer` carries an adapter.
    fn adapts(&self, proj: Proj, layer: u32) -> bool {
        let path = proj.path(layer);
        self.targets.matches(&path) && !self.exclude.as_ref().is_some_and(|e| e.matches(&path))
    }

    /// The adapters' parameters over the whole model. Names are matched layer by layer over
    /// the first [`MATCHED_LAYERS`] layers; a deeper model (none exists; a hand-written
    /// architecture may say so) repeats their share.
    pub fn params(&self, a: &Arch) -> f64 {
        let matched = a.layers.min(MATCHED_LAYERS);
        let per_rank: f64 = (0..matched)
            .flat_map(|l| Proj::ALL.into_iter().filter(move |&p| self.adapts(p, l)))
            .map(|p| p.in_plus_out(a))
            .sum();
        self.rank as f64 * per_rank * f64::from(a.layers) / f64::from(matched.max(1))
    }

    /// The adapted projections' names (those of any layer), for notes.
    pub fn target_names(&self, a: &Arch) -> String {
        let names: Vec<&str> = Proj::ALL
            .into_iter()
            .filter(|&p| (0..a.layers.min(MATCHED_LAYERS)).any(|l| self.adapts(p, l)))
            .map(Proj::name)
            .collect();
        if names.is_empty() {
            "no decoder projection".into()
        } else {
            names.join(", ")
        }
    }

    /// The parameters of one adapter slot in vLLM: every projection vLLM wraps for LoRA,
    /// whatever this adapter targets, at `max_lora_rank`, which verl rounds up to a rank vLLM
    /// serves (`get_vllm_max_lora_rank`: 1, 8, 16, 32, 64, 128, 256, 320, 512;
    /// verl/workers/rollout/vllm_rollout/utils.py in verl 0.9.1).
    pub fn vllm_slot_params(&self, a: &Arch) -> f64 {
        const RANKS: [u64; 9] = [1, 8, 16, 32, 64, 128, 256, 320, 512];
        let rank = RANKS
            .into_iter()
            .find(|&r| r >= self.rank)
            .unwrap_or(self.rank);
        let per_layer: f64 = Proj::ALL.into_iter().map(|p| p.vllm_in_plus_out(a)).sum();
        rank as f64 * per_layer * a.layers as f64
    }

    /// The note a breakdown carries: what is trained, and how much of the model that is.
    pub fn note(&self, a: &Arch, rest: &str) -> String {
        let p = self.params(a);
        format!(
            "LoRA rank {} on {}: {:.1} M adapter parameters ({:.2} % of the model) have gradients and AdamW state; {rest}",
            self.rank,
            self.target_names(a),
            p / 1e6,
            100.0 * p / a.params
        )
    }
}

/// The label of the trained parameters' gradients or optimizer state in a breakdown: the
/// LoRA adapters' when there are adapters.
pub fn trained_label(lora: bool, what: &str) -> String {
    if lora {
        format!("LoRA adapters' {what}")
    } else {
        what.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::lookup;

    #[test]
    fn all_linear_on_qwen2_5_7b_counts_every_projection() {
        // Qwen2.5-7B: hidden 3584, 4 KV heads × 128, intermediate 18944, 28 layers. Per
        // layer 9h + 2kv + 3f = 90112 (q and o 2h, k and v h + kv, the MLP's three h + f);
        // at rank 32, 80,740,352 parameters, 1.06 % of the model.
        let a = lookup("Qwen/Qwen2.5-7B-Instruct");
        let l = Lora::new(32, Some("all-linear"), None);
        assert_eq!(l.params(&a), 32.0 * 90112.0 * 28.0);
        assert!(l.notes.is_empty());
        // vLLM's slot is every projection at the rank, whatever the adapter targets; rank 20
        // is served at 32.
        let qv = Lora::new(20, Some("[q_proj,v_proj]"), None);
        assert_eq!(qv.vllm_slot_params(&a), l.params(&a));
    }

    #[test]
    fn qwen3_queries_are_wider_than_the_hidden_size() {
        // Qwen3-4B: hidden 2560, 32 heads × 128 = 4096 wide queries, 8 KV heads, intermediate
        // 9728: q and o 2560 + 4096, k and v 2560 + 1024, the MLP's three 2560 + 9728.
        let a = lookup("Qwen/Qwen3-4B");
        let l = Lora::new(16, None, None);
        assert_eq!(l.params(&a), 16.0 * 57344.0 * 36.0);
    }

    #[test]
    fn names_match_as_peft_matches_them() {
        let a = lookup("Qwen/Qwen2.5-7B-Instruct");
        let per_layer = |l: &Lora| l.params(&a) / l.rank as f64 / a.layers as f64;
        let (h, kv, f) = (3584.0, 512.0, 18944.0);
        // A list entry matches a module named by it or ending in `.` + it.
        let l = Lora::new(8, Some(r#"["q_proj", "v_proj", "lm_head"]"#), None);
        assert_eq!(per_layer(&l), 2.0 * h + h + kv);
        assert!(l.notes[0].contains("lm_head"), "{:?}", l.notes);
        let l = Lora::new(8, Some("[self_attn.k_proj]"), None);
        assert_eq!(per_layer(&l), h + kv);
        assert!(l.notes.is_empty());
        // A full name adapts that layer's module only.
        let l = Lora::new(8, Some("[model.layers.0.mlp.down_proj]"), None);
        assert_eq!(l.params(&a), 8.0 * (h + f));
        // A regular expression must match the whole name, layer by layer.
        let l = Lora::new(8, Some(r".*\.(q|v)_proj"), None);
        assert_eq!(per_layer(&l), 2.0 * h + h + kv);
        let l = Lora::new(8, Some(r".*layers\.(1[0-9])\.self_attn\.q_proj"), None);
        assert_eq!(l.params(&a), 8.0 * 10.0 * 2.0 * h);
        // A hand-written architecture of 16M layers is counted from its first 1024.
        let deep = Arch {
            layers: 1 << 24,
            ..a.clone()
        };
        let all = Lora::new(8, None, None);
        assert_eq!(
            all.params(&deep),
            all.params(&a) * f64::from(deep.layers) / f64::from(a.layers)
        );
        // A bare name as a string is a regular expression over the whole name: it matches
        // nothing (PEFT then refuses to start).
        assert_eq!(Lora::new(8, Some("q_proj"), None).params(&a), 0.0);
        let l = Lora::new(
            8,
            Some("all-linear"),
            Some("[gate_proj, up_proj, down_proj]"),
        );
        assert_eq!(per_layer(&l), 2.0 * (2.0 * h) + 2.0 * (h + kv));
    }

    #[test]
    fn what_orch_cannot_read_is_said() {
        let a = lookup("Qwen/Qwen2.5-7B-Instruct");
        let all = Lora::new(8, None, None).params(&a);
        // A look-ahead is Python's, not Rust's regex crate's: every projection counted.
        let l = Lora::new(8, Some(r"(?!x).*_proj"), None);
        assert_eq!(l.params(&a), all);
        assert!(l.notes[0].contains("cannot read"), "{:?}", l.notes);
        let l = Lora::new(8, None, Some(r"(?<=x)q_proj"));
        assert_eq!(l.params(&a), all);
        assert!(l.notes[0].contains("nothing is excluded"), "{:?}", l.notes);
        let l = Lora::new(8, Some("[]"), None);
        assert_eq!(l.params(&a), 0.0);
        assert!(l.notes[0].contains("empty"), "{:?}", l.notes);
    }
}
