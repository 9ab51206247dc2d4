//! The type a trainer key expects, read from its default in the template's key schema, and
//! whether a value has it: `trainer.total_epochs: lots` or `data.max_prompt_length: 512.5` is
//! found here, before anything is rendered, not by the trainer after a queue wait.
//!
//! The schema's defaults come from the trainers' own reference configs (verl's
//! `ppo_trainer.yaml`, AReaL's config, the torchrun keys): a boolean default wants a boolean;
//! a number wants a number; an integer default of a key that counts something (a size, a
//! length, steps, epochs, a frequency, GPUs) wants an integer — other integer defaults
//! (`entropy_coeff: 0`, `top_p: 1`) take any number. Null, string, list and mapping defaults
//! take anything, and so does a Hydra interpolation (`${data.max_prompt_length}`).

use serde_yaml::Value;

/// What a key's default says its values must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Bool,
    Integer,
    Number,
    Anything,
}

impl Expected {
    /// The type `key`'s default `default` implies.
    pub fn of(key: &str, default: &Value) -> Expected {
        match default {
            Value::Bool(_) => Expected::Bool,
            Value::Number(n) if n.is_f64() => Expected::Number,
            Value::Number(_) if counts_something(key) => Expected::Integer,
            Value::Number(_) => Expected::Number,
            _ => Expected::Anything,
        }
    }

    /// Why `value` is not of this type, or nothing.
    pub fn mismatch(self, value: &Value) -> Option<String> {
        if let Value::String(s) = value
            && s.trim_start().starts_with("${")
        {
            return None;
        }
        let ok = match self {
            Expected::Anything => true,
            Expected::Bool => matches!(value, Value::Bool(_)),
            Expected::Number => {
                matches!(value, Value::Number(n) if n.as_f64().is_some_and(f64::is_finite))
            }
            Expected::Integer => matches!(value, Value::Number(n) if n.is_i64() || n.is_u64()),
        };
        (!ok).then(|| {
            match self {
                Expected::Bool => "must be true or false",
                Expected::Integer => "must be a whole number",
                Expected::Number => "must be a number",
                Expected::Anything => unreachable!("anything matches"),
            }
            .to_string()
        })
    }
}

/// The key's last segment names a count: a size, length, steps, epochs, a frequency, GPUs,
/// nodes, workers, tokens, a seed.
fn counts_something(key: &str) -> bool {
    const WORDS: [&str; 22] = [
        "size", "sizes", "length", "len", "epochs", "epoch", "steps", "step", "freq", "n", "num",
        "seed", "nnodes", "gpus", "nodes", "workers", "tokens", "batch", "layers", "heads", "rank",
        "dim",
    ];
    let last = key.rsplit('.').next().unwrap_or(key);
    last.split('_').any(|w| WORDS.contains(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn counts_want_whole_numbers_and_coefficients_any_number() {
        let size = Expected::of("data.max_prompt_length", &v("512"));
        assert_eq!(size, Expected::Integer);
        assert!(size.mismatch(&v("512.5")).is_some());
        assert!(size.mismatch(&v("1e30")).is_some());
        assert!(size.mismatch(&v("lots")).is_some());
        assert!(size.mismatch(&v("1024")).is_none());
        assert!(size.mismatch(&v("'${data.x}'")).is_none());
        let coeff = Expected::of("actor_rollout_ref.actor.entropy_coeff", &v("0"));
        assert_eq!(coeff, Expected::Number);
        assert!(coeff.mismatch(&v("0.001")).is_none());
        assert!(coeff.mismatch(&v(".inf")).is_some());
        assert_eq!(
            Expected::of("trainer.total_epochs", &v("30")),
            Expected::Integer
        );
        assert_eq!(Expected::of("rollout.n", &v("1")), Expected::Integer);
    }

    #[test]
    fn flags_want_booleans_and_strings_take_anything() {
        let flag = Expected::of(
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            &v("false"),
        );
        assert!(flag.mismatch(&v("'yes please'")).is_some());
        assert!(flag.mismatch(&v("true")).is_none());
        assert_eq!(
            Expected::of("trainer.logger", &v("console")),
            Expected::Anything
        );
        assert_eq!(Expected::of("x", &v("null")), Expected::Anything);
    }
}
