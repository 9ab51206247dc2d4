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
use orch_core::planner::throughput;
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
    "18446744073709551615",
    "4294967296",
];

/// A key and values that make sense for it.
type Key = (&'static str, &'static [&'static str]);

/// Keys an experiment, its trainer or a ladder step may name, per template, each with values
/// that make sense for it: most generated values are these, so most cases reach the estimator
/// and the renderer; the rest come from [`VALUES`].
const VERL_KEYS: &[Key] = &[
    ("data.train_batch_size", &["8", "64", "1024"]),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", &["8", "256"]),
    (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        &["1", "4", "32"],
    ),
    (
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        &["0.3", "0.6", "0.9"],
    ),
    ("actor_rollout_ref.rollout.n", &["1", "5", "16"]),
    (
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        &["1", "2", "4"],
    ),
    (
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        &["true", "false"],
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        &["true", "false"],
    ),
    ("data.max_prompt_length", &["256", "1024", "8192"]),
    ("data.max_response_length", &["512", "4096", "65536"]),
];

const AREAL_KEYS: &[Key] = &[
    ("sglang.mem_fraction_static", &["0.5", "0.8", "0.9"]),
    ("actor.mb_spec.max_tokens_per_mb", &["1024", "16384"]),
    ("actor.gradient_checkpointing", &["true", "false"]),
    ("train_dataset.batch_size", &["4", "8", "64"]),
    ("gconfig.n_samples", &["1", "4", "16"]),
    ("gconfig.max_new_tokens", &["256", "1024", "32768"]),
    ("rollout.max_concurrent_rollouts", &["8", "256"]),
];

const TORCHRUN_KEYS: &[Key] = &[
    ("micro_batch_size", &["1", "8", "512"]),
    ("gradient_accumulation_steps", &["1", "4"]),
    ("max_seq_len", &["128", "2048", "131072"]),
    ("gradient_checkpointing", &["true", "false"]),
    ("precision", &["bf16", "fp32"]),
    ("model.params_m", &["10", "512", "70000"]),
    ("model.d_model", &["64", "2048", "100000"]),
    ("model.n_layers", &["1", "16", "4000000000"]),
    ("model.architecture.hidden_size", &["2048", "8192"]),
    (
        "model.architecture.num_hidden_layers",
        &["2", "80", "4000000000"],
    ),
];

/// Keys no template takes (or that only a `+` may add).
const STRAY_KEYS: &[Key] = &[("+new.key", &["1"]), ("unknown.key", &["1"])];

/// The template, weighted towards the real ones.
fn template() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => Just("verl-grpo"),
        3 => Just("areal-grpo"),
        3 => Just("torchrun-yaml"),
        1 => Just("nope"),
    ]
}

/// The profile, weighted towards the fuzzed one.
fn profile() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        1 => Just("a40"),
        1 => Just("h100-80g"),
        1 => Just("rtx4090"),
        4 => Just("fuzzed"),
        1 => Just("nope"),
    ]
}

/// The keys `template` takes.
fn keys_of(template: &str) -> &'static [Key] {
    match template {
        "verl-grpo" => VERL_KEYS,
        "areal-grpo" => AREAL_KEYS,
        "torchrun-yaml" => TORCHRUN_KEYS,
        _ => STRAY_KEYS,
    }
}

/// One value for `sane`'s key: eleven in twelve times a sane one, else a wild one (a case
/// holds a dozen values, and one wild one is usually refused).
fn value(sane: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop_oneof![
        11 => prop::sample::select(sane),
        1 => prop::sample::select(VALUES),
    ]
}

/// Up to `max` settings of `template`'s keys, now and then a stray one.
fn pairs(
    template: &'static str,
    max: usize,
) -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    let key = prop_oneof![
        12 => prop::sample::select(keys_of(template)),
        1 => prop::sample::select(STRAY_KEYS),
    ];
    prop::collection::btree_map(key.prop_map(|(k, sane)| (k, sane)), Just(()), 0..max)
        .prop_flat_map(|keys| {
            keys.into_keys()
                .map(|(k, sane)| (Just(k), value(sane)))
                .collect::<Vec<_>>()
        })
}

/// Up to five resources (`gpus`, `nodes`, `mem_gb`, `time`, `cpus_per_task`, in that order).
fn resources() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    (
        value(&["1", "4", "8"]),
        value(&["1", "2"]),
        value(&["64", "256"]),
        value(&["01:00:00", "2-00:00:00"]),
        value(&["8", "32"]),
        0..=5usize,
    )
        .prop_map(|(g, n, m, t, c, len)| {
            let all = [
                ("gpus", g),
                ("nodes", n),
                ("mem_gb", m),
                ("time", t),
                ("cpus_per_task", c),
            ];
            all[..len].to_vec()
        })
}

/// The fuzzed profile's GPU memory, GPUs per node and host memory.
fn card() -> impl Strategy<Value = (&'static str, &'static str, &'static str)> {
    (
        value(&["24", "44.42", "80"]),
        value(&["8", "16"]),
        value(&["512", "2048"]),
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
        devices: None,
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
    std::fs::write(
        dir.join("experiments/fuzz.yaml"),
        format!(
            "template: {template}\nprofile: {profile}\nladder: fuzz\nmodel: Qwen/Qwen2.5-7B-Instruct\noverrides:\n{}resources:\n{}",
            yaml_map(overrides, "  "),
            yaml_map(resources, "  "),
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("profiles/fuzzed.yaml"),
        format!(
            "description: fuzzed\ngpu: {{model: X, memory_gib: {}, per_node: {}}}\nhost: {{memory_gib: {}}}\nslurm: {{partition: gpu, gres_type: x, gpus: 4, nodes: 1, cpus_per_task: 8, mem_gb: 512, time: '01:00:00'}}\n",
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
                format!("      {}: {{divide: 2}}\n", keys_of(template)[0].0)
            } else {
                changes
            }
        ),
    )
    .unwrap();
}

/// One generated project, owned.
#[derive(Debug, Clone)]
struct Case {
    template: &'static str,
    profile: &'static str,
    overrides: Vec<(&'static str, &'static str)>,
    resources: Vec<(&'static str, &'static str)>,
    gpu: (&'static str, &'static str, &'static str),
    step: Vec<(&'static str, &'static str)>,
    op: &'static str,
}

fn cases() -> impl Strategy<Value = Case> {
    template()
        .prop_flat_map(|template| {
            (
                Just(template),
                profile(),
                pairs(template, 6),
                resources(),
                card(),
                pairs(template, 3),
                prop::sample::select(&["multiply", "divide", "add", "set"][..]),
            )
        })
        .prop_map(
            |(template, profile, overrides, resources, gpu, step, op)| Case {
                template,
                profile,
                overrides,
                resources,
                gpu,
                step,
                op,
            },
        )
}

/// How far a case got before orch refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Depth {
    /// The experiment, profile, template or ladder was refused as it loaded.
    Refused,
    /// It loaded and was estimated; the plan's checks refused it.
    Estimated,
    /// It passed every check and rendered.
    Rendered,
}

/// Load, estimate, check, render and step `case`, as `orch submit` would; panics are the bug.
fn exercise(case: &Case) -> Depth {
    let dir = tempfile::tempdir().unwrap();
    project(
        dir.path(),
        &Fuzzed {
            template: case.template,
            profile: case.profile,
            overrides: &case.overrides,
            resources: &case.resources,
            gpu: case.gpu,
            step: &case.step,
            op: case.op,
        },
    );
    let catalog = Catalog::new(dir.path());
    let Ok(mut found) = Experiment::find(&catalog, "fuzz") else {
        return Depth::Refused;
    };
    let Ok((setup, plan)) = Setup::load(&catalog, found.remove(0), None, &[]) else {
        return Depth::Refused;
    };
    if let Ok(estimator) = Estimator::new(&setup, &plan) {
        let e = estimator.estimate(&setup, &plan);
        assert!(!e.gpu_peak_gib().is_nan(), "NaN peak for {case:?}");
        // The planner's throughput model reads the workload's knobs (rollout demand, engines).
        let _ = throughput::predict(&e, plan.resources.gpus, setup.profile.gpu.memory_gib);
    }
    if plan.check(&setup).is_err() {
        return Depth::Estimated;
    }
    let info = attempt_in(dir.path());
    let _ = render_to_strings(&catalog, &setup, &plan, &info);
    for step in &setup.ladder.steps {
        let _ = plan.apply(step, &setup);
    }
    Depth::Rendered
}

proptest! {
    // proptest's default: 256 cases; `PROPTEST_CASES=20000` for a longer hunt.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn config_loading_checking_rendering_and_estimating_never_panic(case in cases()) {
        exercise(&case);
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

/// The settings `template`'s trainer refuses to start without: verl's log-prob passes' micro
/// batch (validate_config).
fn required(template: &str) -> &'static [(&'static str, &'static str)] {
    match template {
        "verl-grpo" => &[
            (
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "2",
            ),
            (
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                "2",
            ),
        ],
        _ => &[],
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
        let overrides = required(template);
        project(
            dir.path(),
            &Fuzzed {
                template,
                profile: "fuzzed",
                overrides,
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
        let e = Estimator::new(&setup, &plan)
            .unwrap()
            .estimate(&setup, &plan);
        assert!(e.gpu_peak_gib() > 0.0);
        let info = attempt_in(dir.path());
        render_to_strings(&catalog, &setup, &plan, &info).unwrap();
    }
}

/// The property above is not mostly early returns: with proptest's fixed seed, a good share
/// of generated projects pass every check and render, and some are refused at each stage.
#[test]
fn the_generated_projects_reach_every_depth() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = cases();
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..200 {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        *counts.entry(exercise(&case)).or_insert(0u32) += 1;
    }
    let rendered = counts.get(&Depth::Rendered).copied().unwrap_or(0);
    assert!(
        rendered >= 40,
        "only {rendered} of 200 rendered: {counts:?}"
    );
    assert!(counts.len() == 3, "some depth never reached: {counts:?}");
}

/// Every wild value in every key, one at a time, with the rest sane: deterministic, so a panic
/// that the random property meets once in a few hundred runs (CI's stop 31 met an overflow in
/// AReaL's step tokens from `gconfig.max_new_tokens: 1e30`) fails every run here.
/// Keys the estimators read that the random cases leave at their templates' values (batches
/// of the other passes, token budgets, parallelism, the cluster's size): only the deterministic
/// test below sets them.
const DEEP_KEYS: &[(&str, &[&str])] = &[
    (
        "verl-grpo",
        &[
            "actor_rollout_ref.actor.use_dynamic_bsz",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            "actor_rollout_ref.actor.entropy_coeff",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.model.use_remove_padding",
            "actor_rollout_ref.model.lora_rank",
            "actor_rollout_ref.model.target_modules",
            "actor_rollout_ref.model.exclude_modules",
            "actor_rollout_ref.model.lora_adapter_path",
            "actor_rollout_ref.rollout.layered_summon",
            "actor_rollout_ref.actor.ppo_micro_batch_size",
            "critic.ppo_micro_batch_size_per_gpu",
            "critic.forward_micro_batch_size_per_gpu",
            "critic.ulysses_sequence_parallel_size",
            "algorithm.adv_estimator",
            "trainer.n_gpus_per_node",
            "trainer.nnodes",
        ],
    ),
    (
        "areal-grpo",
        &[
            "allocation_mode",
            "cluster.n_nodes",
            "cluster.n_gpus_per_node",
            "train_dataset.max_length",
            "actor.kl_ctl",
            "actor.recompute_logprob",
            "actor.use_lora",
            "actor.lora_rank",
            "actor.target_modules",
            "actor.use_decoupled_loss",
        ],
    ),
];

#[test]
fn every_wild_value_in_every_key_alone_never_panics() {
    // Per template: how far the override pass got, over every key and wild value.
    let mut reached = std::collections::BTreeMap::new();
    for template in ["verl-grpo", "areal-grpo", "torchrun-yaml"] {
        let deep = DEEP_KEYS
            .iter()
            .filter(|(t, _)| *t == template)
            .flat_map(|(_, keys)| keys.iter().copied());
        let keys: Vec<&str> = keys_of(template)
            .iter()
            .map(|&(k, _)| k)
            .chain(deep)
            .collect();
        let base = required(template);
        for &key in &keys {
            for &wild in VALUES {
                let mut overrides = base.to_vec();
                overrides.retain(|(k, _)| *k != key);
                let case = |overrides: Vec<(&'static str, &'static str)>, step| Case {
                    template,
                    profile: "fuzzed",
                    overrides,
                    resources: vec![],
                    gpu: ("44.42", "8", "512"),
                    step,
                    op: "multiply",
                };
                // The wild value as the setting (a sane ladder), then as a ladder step's factor
                // over sane settings: a ladder that fails to load must not hide the first.
                let depth = exercise(&case(
                    [overrides.clone(), vec![(key, wild)]].concat(),
                    vec![],
                ));
                let best = reached.entry(template).or_insert(depth);
                *best = (*best).max(depth);
                exercise(&case(overrides, vec![(key, wild)]));
            }
        }
    }
    // Every template's wild settings reached the renderer somewhere: the loop exercised the
    // estimator, the checks and the ladder, not only the loader.
    assert!(
        reached.values().all(|d| *d == Depth::Rendered) && reached.len() == 3,
        "{reached:?}"
    );
}
