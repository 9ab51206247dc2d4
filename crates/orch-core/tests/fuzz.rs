//! Property tests: nothing orch reads from a user can make it panic — experiment, profile and
//! ladder files built from real keys with wild values, the plans they make (checked and
//! rendered), a run's event log with garbage in it, and the estimator fed absurd settings.
//! A bounded number of cases (256 each) keeps the suite fast.

use std::path::Path;

use orch_core::config::Catalog;
use orch_core::config::experiment::Experiment;
use orch_core::estimate::Estimator;
use orch_core::ledger::{Journal, Ledger};
use orch_core::plan::Setup;
use orch_core::render::{AttemptInfo, render_to_strings};
use proptest::prelude::*;

/// Values that have broken parsers somewhere: empty, huge, negative, fractional, text,
/// YAML's own oddities, quotes and shell metacharacters.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "3",
    "512.5",
    "1e30",
    "1e999",
    "-0.0",
    ".nan",
    ".inf",
    "99999999999999999999999",
    "true",
    "no",
    "~",
    "null",
    "''",
    "\"a'b\"",
    "'$(rm -rf /)'",
    "[1, 2]",
    "{a: 1}",
    "x",
    "0x10",
    "24:00:00",
    "99:99:99",
    "\"\"",
];

/// Keys an experiment, its trainer or a ladder step may name.
const KEYS: &[&str] = &[
    "data.train_batch_size",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.actor.fsdp_config.param_offload",
    "data.max_prompt_length",
    "data.max_response_length",
    "micro_batch_size",
    "max_seq_len",
    "model.d_model",
    "model.n_layers",
    "model.architecture.hidden_size",
    "sglang.mem_fraction_static",
    "actor.mb_spec.max_tokens_per_mb",
    "+new.key",
    "unknown.key",
];

const TEMPLATES: &[&str] = &["verl-grpo", "areal-grpo", "torchrun-yaml", "nope"];
const PROFILES: &[&str] = &["a40", "h100-80g", "rtx4090", "fuzzed", "nope"];

fn pairs() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    prop::collection::vec(
        (prop::sample::select(KEYS), prop::sample::select(VALUES)),
        0..8,
    )
}

fn yaml_map(pairs: &[(&str, &str)], indent: &str) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{indent}{k}: {v}\n"))
        .collect()
}

/// Attempt 1 of a run kept in `dir`, rendered for the simulated trainer.
fn attempt_in(dir: &Path) -> AttemptInfo {
    let attempt = dir.join("attempt");
    AttemptInfo {
        run_id: "r".into(),
        attempt: 1,
        dir: attempt.clone(),
        write_dir: attempt,
        run_dir: dir.to_path_buf(),
        job_name: "orch-r-a1".into(),
        simulate: true,
        checkpoint_dir: dir.join("ckpt"),
    }
}

/// One fuzzed project: an experiment, a profile and a ladder.
struct Fuzzed<'a> {
    template: &'a str,
    profile: &'a str,
    overrides: &'a [(&'a str, &'a str)],
    resources: &'a [(&'a str, &'a str)],
    /// The profile's GPU memory, GPUs per node and host memory.
    gpu: (&'a str, &'a str, &'a str),
    step: &'a [(&'a str, &'a str)],
    op: &'a str,
}

/// Write `f` into the project directory `dir`.
fn project(dir: &Path, f: &Fuzzed<'_>) {
    let Fuzzed {
        template,
        profile,
        overrides,
        resources,
        gpu,
        step,
        op,
    } = *f;
    for sub in ["experiments", "profiles", "ladders"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let res: Vec<(&str, &str)> = resources
        .iter()
        .enumerate()
        .map(|(i, (_, v))| {
            (
                ["gpus", "nodes", "mem_gb", "time", "cpus_per_task"][i % 5],
                *v,
            )
        })
        .collect();
    std::fs::write(
        dir.join("experiments/fuzz.yaml"),
        format!(
            "template: {template}\nprofile: {profile}\nladder: fuzz\nmodel: Qwen/Qwen2.5-7B-Instruct\noverrides:\n{}resources:\n{}",
            yaml_map(overrides, "  "),
            yaml_map(&res, "  "),
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("profiles/fuzzed.yaml"),
        format!(
            "description: fuzzed\ngpu: {{model: X, memory_gib: {}, per_node: {}}}\nhost: {{memory_gib: {}}}\nslurm: {{partition: gpu, gres_type: x, gpus: 4, nodes: 1, cpus_per_task: 8, mem_gb: 64, time: '01:00:00'}}\n",
            gpu.0, gpu.1, gpu.2
        ),
    )
    .unwrap();
    let changes: String = step
        .iter()
        .map(|(k, v)| format!("      {k}: {{{op}: {v}}}\n"))
        .collect();
    std::fs::write(
        dir.join("ladders/fuzz.yaml"),
        format!(
            "steps:\n  - name: s\n    answers: [gpu_oom]\n    overrides:\n{}",
            if changes.is_empty() {
                "      data.train_batch_size: {divide: 2}\n".to_string()
            } else {
                changes
            }
        ),
    )
    .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn config_loading_checking_rendering_and_estimating_never_panic(
        template in prop::sample::select(TEMPLATES),
        profile in prop::sample::select(PROFILES),
        overrides in pairs(),
        resources in pairs(),
        gpu in (prop::sample::select(VALUES), prop::sample::select(VALUES), prop::sample::select(VALUES)),
        step in pairs(),
        op in prop::sample::select(&["multiply", "divide", "add", "set"][..]),
    ) {
        let dir = tempfile::tempdir().unwrap();
        project(dir.path(), &Fuzzed { template, profile, overrides: &overrides, resources: &resources, gpu, step: &step, op });
        let catalog = Catalog::new(dir.path());
        let Ok(mut found) = Experiment::find(&catalog, "fuzz") else { return Ok(()) };
        let Ok((setup, plan)) = Setup::load(&catalog, found.remove(0), None, &[]) else {
            return Ok(());
        };
        if let Ok(estimator) = Estimator::new(&setup) {
            let e = estimator.estimate(&setup, &plan);
            prop_assert!(!e.gpu_peak_gib().is_nan());
        }
        if plan.check(&setup).is_err() {
            return Ok(());
        }
        let info = attempt_in(dir.path());
        let _ = render_to_strings(&catalog, &setup, &plan, &info);
        for step in &setup.ladder.steps {
            let _ = plan.apply(step, &setup);
        }
    }

    #[test]
    fn a_run_log_with_garbage_in_it_never_panics(
        lines in prop::collection::vec(
            prop::sample::select(&[
                r#"{"event":"created","ts":"2026-01-01T00:00:00Z","format":1,"run":"r","experiment":"e"}"#,
                r#"{"event":"submitted","ts":"2026-01-01T00:00:00Z","attempt":1,"job_id":"7"}"#,
                r#"{"event":"finished","ts":"2026-01-01T00:00:00Z","attempt":1,"outcome":"gpu_oom"}"#,
                r#"{"event":"finished","ts":"x","attempt":99999999999,"outcome":"nonsense"}"#,
                r#"{"event":"ended","ts":"2026-01-01T00:00:00Z","state":"succeeded","summary":"s"}"#,
                r#"{"event":"unknown"}"#,
                r#"{"event":"submitted","attempt":-1}"#,
                "{",
                "",
                "\u{0}\u{1}garbage",
                "[]",
            ][..]),
            0..12,
        ),
        torn in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().to_path_buf());
        let run_dir = dir.path().join("r-20260101-000000-abcd");
        std::fs::create_dir_all(&run_dir).unwrap();
        let mut text = lines.join("\n");
        if !torn {
            text.push('\n');
        }
        std::fs::write(run_dir.join("events.jsonl"), text).unwrap();
        if let Ok(run) = ledger.open("r-20260101-000000-abcd")
            && let Ok(mut journal) = Journal::open(run)
        {
            let _ = journal.record();
        }
        let _ = ledger.ids();
    }
}

/// The generator reaches the deep end: with sane values its project loads, checks, estimates
/// and renders (so the properties above are not all early returns).
#[test]
fn the_fuzzed_project_loads_and_renders_with_sane_values() {
    for template in ["verl-grpo", "torchrun-yaml", "areal-grpo"] {
        let dir = tempfile::tempdir().unwrap();
        let step_key = match template {
            "verl-grpo" => "data.train_batch_size",
            "areal-grpo" => "actor.mb_spec.max_tokens_per_mb",
            _ => "micro_batch_size",
        };
        project(
            dir.path(),
            &Fuzzed {
                template,
                profile: "fuzzed",
                overrides: &[],
                resources: &[],
                gpu: ("44.42", "8", "512"),
                step: &[(step_key, "2")],
                op: "divide",
            },
        );
        let catalog = Catalog::new(dir.path());
        let experiment = Experiment::find(&catalog, "fuzz").unwrap().remove(0);
        let (setup, plan) = Setup::load(&catalog, experiment, None, &[]).unwrap();
        plan.check(&setup).unwrap();
        let e = Estimator::new(&setup).unwrap().estimate(&setup, &plan);
        assert!(e.gpu_peak_gib() > 0.0);
        let info = attempt_in(dir.path());
        render_to_strings(&catalog, &setup, &plan, &info).unwrap();
    }
}
