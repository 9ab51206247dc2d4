//! The trainers' own command lines, parsed the way the real trainers would see them:
//! Hydra `key=value` overrides (verl, AReaL), YAML config files flattened to dotted keys
//! (AReaL `--config`, torchrun `--config`), and `--flag VALUE` pairs ([`take_flag`]); a trainer's
//! own flags are read in its module under `trainers/`.

pub use orch_memory::overrides::{Overrides, parse_bool, parse_u64, unquote};

/// Take `--name VALUE` or `--name=VALUE` (also `-name`, and `_`/`-` spelled either way)
/// out of `args`.
pub fn take_flag(args: &mut Vec<String>, name: &str) -> Option<String> {
    let norm = |s: &str| s.trim_start_matches('-').replace('-', "_");
    let want = norm(name);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].clone();
        if a.starts_with('-') {
            if let Some((k, v)) = a.split_once('=') {
                if norm(k) == want {
                    args.remove(i);
                    return Some(v.to_string());
                }
            } else if norm(&a) == want && i + 1 < args.len() {
                let v = args.remove(i + 1);
                args.remove(i);
                return Some(v);
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hydra_overrides_parse() {
        let mut o = Overrides::new();
        let rest = o.apply_hydra(&strings(&[
            "data.train_batch_size=1024",
            "actor_rollout_ref.actor.fsdp_config.param_offload=False",
            "actor_rollout_ref.model.enable_gradient_checkpointing=True",
            "actor_rollout_ref.rollout.free_cache_engine=true",
            "+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
            "++trainer.val_before_train=false",
            "actor_rollout_ref.model.path='Qwen/Qwen2.5-7B-Instruct'",
            "trainer.experiment_name=\"my run\"",
            "trainer.logger=[\"console\"]",
            "data.seed=null",
            "--config-path=x",
            "train.py",
        ]));
        assert_eq!(rest, strings(&["--config-path=x", "train.py"]));
        assert_eq!(o.u64_opt("data.train_batch_size"), Some(1024));
        assert!(!o.bool_or("actor_rollout_ref.actor.fsdp_config.param_offload", true));
        assert!(o.bool_or(
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            false
        ));
        assert!(o.bool_or("actor_rollout_ref.rollout.free_cache_engine", false));
        assert_eq!(
            o.get("actor_rollout_ref.actor.fsdp_config.model_dtype")
                .as_deref(),
            Some("bf16")
        );
        assert!(!o.bool_or("trainer.val_before_train", true));
        assert_eq!(
            o.get("actor_rollout_ref.model.path").as_deref(),
            Some("Qwen/Qwen2.5-7B-Instruct")
        );
        assert_eq!(o.get("trainer.experiment_name").as_deref(), Some("my run"));
        assert_eq!(o.get("trainer.logger").as_deref(), Some("[\"console\"]"));
        assert_eq!(o.get("data.seed"), None);
        assert_eq!(o.given.len(), 10);
    }

    #[test]
    fn hydra_delete_and_value_with_equals() {
        let mut o = Overrides::new();
        o.apply_hydra(&strings(&["a.b=1", "c=x=y", "~a.b"]));
        assert_eq!(o.get("a.b"), None);
        assert_eq!(o.get("c").as_deref(), Some("x=y"));
    }

    #[test]
    fn booleans_and_numbers() {
        for t in ["True", "true", "TRUE", "1", "yes"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["False", "false", "0", "no"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        assert_eq!(parse_bool("maybe"), None);
        assert_eq!(parse_u64("1024"), Some(1024));
        assert_eq!(parse_u64("1024.0"), Some(1024));
        assert_eq!(parse_u64("1e3"), Some(1000));
        assert_eq!(parse_u64("1_024"), Some(1024));
        assert_eq!(parse_u64("0.5"), None);
    }

    #[test]
    fn interpolation_resolves() {
        let mut o = Overrides::new();
        o.set("trainer.project_name", "orch");
        o.set("trainer.experiment_name", "diamonds-seed0");
        assert_eq!(
            o.str_or(
                "trainer.default_local_dir",
                "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
            ),
            "checkpoints/orch/diamonds-seed0"
        );
        o.set("x", "${oc.select:missing.key,7}");
        assert_eq!(o.get("x").as_deref(), Some("7"));
    }

    #[test]
    fn yaml_flattens_and_suffix_lookup() {
        let doc: serde_yaml::Value = serde_yaml::from_str(
            "model:\n  params_m: 512\n  n_layers: 8\ntraining:\n  micro_batch_size: 2\ngradient_checkpointing: true\nprecision: bf16\nempty: null\n",
        )
        .unwrap();
        let mut o = Overrides::new();
        o.merge_yaml(&doc);
        assert_eq!(o.u64_opt("model.params_m"), Some(512));
        assert_eq!(o.get_suffix("micro_batch_size").as_deref(), Some("2"));
        assert!(o.bool_or("gradient_checkpointing", false));
        assert_eq!(o.get("empty"), None);
    }
}
