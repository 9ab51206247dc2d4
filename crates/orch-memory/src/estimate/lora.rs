//! LoRA adapters as PEFT builds them: which of a decoder layer's projections carry one, and
//! how many parameters they add. A LoRA run trains only these: its gradients and AdamW state
//! are the adapters', not the model's.
//!
//! PEFT's `LoraConfig.target_modules` (peft `tuners/tuners_utils.py`, `check_target_module_exists`
//! and `_maybe_include_all_linear_layers`): `all-linear` is every `nn.Linear` but the output
//! layer; a list matches a module whose name is an entry or ends in `.` + an entry; any other
//! string is a regular expression the whole module name must match. `exclude_modules` takes
//! the same forms and wins. Each adapted `in × out` projection gains `A` (`r × in`) and `B`
//! (`out × r`): `r × (in + out)` parameters.

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

    /// The module's full name in a Hugging Face decoder (what a regular expression meets).
    fn path(self) -> String {
        let block = match self {
            Proj::Q | Proj::K | Proj::V | Proj::O => "self_attn",
            _ => "mlp",
        };
        format!("model.layers.0.{block}.{}", self.name())
    }

    /// `in + out` of the projection: the query's output and the output projection's input
    /// are heads × head_dim (the hidden size in Llama, Qwen2.5 and Mistral, not in Qwen3).
    fn in_plus_out(self, a: &Arch) -> f64 {
        let h = a.hidden as f64;
        let q = a.heads as f64 * a.head_dim as f64;
        let kv = a.kv_heads as f64 * a.head_dim as f64;
        let f = a.intermediate as f64;
        match self {
            Proj::Q | Proj::O => h + q,
            Proj::K | Proj::V => h + kv,
            Proj::Gate | Proj::Up | Proj::Down => h + f,
        }
    }
}

/// A LoRA configuration: its rank and the projections it adapts.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    pub rank: u64,
    pub targets: Vec<Proj>,
    /// Names in `target_modules` that are none of the projections (an embedding, the
    /// `lm_head`, a model with other names): not counted, said in a note.
    pub uncounted: Vec<String>,
}

/// The entries of a list value as orch keeps it: JSON (`["q_proj", "v_proj"]`, from YAML) or
/// Hydra's `[q_proj,v_proj]`.
fn list_entries(value: &str) -> Option<Vec<String>> {
    let inner = value.trim().strip_prefix('[')?.strip_suffix(']')?;
    Some(
        inner
            .split(',')
            .map(|s| s.trim().trim_matches(['"', '\'']).to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// The projections a `target_modules` / `exclude_modules` value selects, and the list
/// entries that name none of them. None: a regular expression that does not compile.
fn select(value: &str) -> Option<(Vec<Proj>, Vec<String>)> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("all-linear") {
        return Some((Proj::ALL.to_vec(), Vec::new()));
    }
    if let Some(names) = list_entries(value) {
        let hits = Proj::ALL
            .into_iter()
            .filter(|p| {
                names
                    .iter()
                    .any(|n| n == p.name() || n.ends_with(&format!(".{}", p.name())))
            })
            .collect();
        let other = names
            .into_iter()
            .filter(|n| {
                !Proj::ALL
                    .iter()
                    .any(|p| n == p.name() || n.ends_with(&format!(".{}", p.name())))
            })
            .collect();
        return Some((hits, other));
    }
    let re = Regex::new(&format!("^(?:{value})$")).ok()?;
    Some((
        Proj::ALL
            .into_iter()
            .filter(|p| re.is_match(&p.path()))
            .collect(),
        Vec::new(),
    ))
}

impl Lora {
    /// From the rank and PEFT's two keys (`target_modules` default `all-linear`, verl's).
    pub fn new(rank: u64, target_modules: Option<&str>, exclude_modules: Option<&str>) -> Self {
        let (mut targets, mut uncounted) = match select(target_modules.unwrap_or("all-linear")) {
            Some(s) => s,
            None => (
                Proj::ALL.to_vec(),
                vec![format!(
                    "{} (not a regular expression orch reads: every projection counted)",
                    target_modules.unwrap_or_default()
                )],
            ),
        };
        if let Some((excluded, _)) = exclude_modules.and_then(select) {
            targets.retain(|p| !excluded.contains(p));
        }
        uncounted.retain(|n| !n.is_empty());
        Self {
            rank,
            targets,
            uncounted,
        }
    }

    /// The adapters' parameters over the whole model.
    pub fn params(&self, a: &Arch) -> f64 {
        let per_layer: f64 = self.targets.iter().map(|p| p.in_plus_out(a)).sum();
        self.rank as f64 * per_layer * a.layers as f64
    }

    /// The adapted projections' names, for notes.
    pub fn target_names(&self) -> String {
        self.targets
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
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
        assert_eq!(l.targets.len(), 7);
        assert_eq!(l.params(&a), 32.0 * 90112.0 * 28.0);
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
    fn lists_regexes_and_exclusions_select_projections() {
        let l = Lora::new(8, Some(r#"["q_proj", "v_proj", "lm_head"]"#), None);
        assert_eq!(l.targets, vec![Proj::Q, Proj::V]);
        assert_eq!(l.uncounted, vec!["lm_head".to_string()]);
        let l = Lora::new(8, Some("[model.layers.0.mlp.down_proj,k_proj]"), None);
        assert_eq!(l.targets, vec![Proj::K, Proj::Down]);
        let l = Lora::new(8, Some(r".*\.(q|v)_proj"), None);
        assert_eq!(l.targets, vec![Proj::Q, Proj::V]);
        // A bare name as a string is a regular expression over the whole name: it matches
        // nothing (PEFT then refuses to start).
        assert!(Lora::new(8, Some("q_proj"), None).targets.is_empty());
        let l = Lora::new(
            8,
            Some("all-linear"),
            Some("[gate_proj, up_proj, down_proj]"),
        );
        assert_eq!(l.targets, vec![Proj::Q, Proj::K, Proj::V, Proj::O]);
    }
}
