//! The planner as pure functions over evidence: the seeds' situations and each rule.

use std::collections::HashSet;

use orch_classify::{FailureClass, MemoryFacts, ProcessUse, Stage};

use super::evidence::Failure;
use super::shared::Answer;
use super::{
    Context, Move, Next, Preflights, Prior, next, preflight, throughput, within, within_band,
};
use crate::config::Catalog;
use crate::config::experiment::Experiment;
use crate::estimate::Estimator;
use crate::plan::{Plan, SetArg, Setup};
use orch_memory::calibration::Band;

/// The built-in experiment `name` on `profile`, with `--set` values.
fn load(name: &str, profile: &str, sets: &[(&str, &str)]) -> (Setup, Plan) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(dir.path());
    let experiment = experiment(&catalog, name);
    let sets: Vec<SetArg> = sets
        .iter()
        .map(|(k, v)| format!("{k}={v}").parse().unwrap())
        .collect();
    Setup::load(&catalog, experiment, Some(profile), &sets).unwrap()
}

/// The experiment `name` of `catalog` (a project's own file, else a built-in one).
fn experiment(catalog: &Catalog, name: &str) -> Experiment {
    Experiment::find(catalog, name)
        .unwrap()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap()
}

/// torch's OOM numbers.
fn torch_oom(tried: f64, free: f64, capacity: f64, allocated: f64, fragment: f64) -> MemoryFacts {
    MemoryFacts {
        tried_to_allocate_gib: Some(tried),
        capacity_gib: Some(capacity),
        free_gib: Some(free),
        process_in_use_gib: Some(capacity - free),
        allocated_gib: Some(allocated),
        reserved_unallocated_gib: Some(fragment),
        ..MemoryFacts::default()
    }
}

fn failed(plan: &Plan, class: FailureClass, facts: MemoryFacts) -> Failure {
    Failure {
        plan: plan.clone(),
        class,
        facts: Some(facts),
    }
}

/// What the planner does after `failures`, and its notes.
fn decide(setup: &Setup, written: &Plan, failures: &[Failure]) -> (Next, Vec<String>) {
    let estimator = Estimator::new(setup, written).unwrap();
    let tried: HashSet<String> = failures.iter().map(|f| f.plan.canonical(setup)).collect();
    let mut notes = Vec::new();
    let next = next(
        &Context {
            setup,
            estimator: Some(&estimator),
            written,
            current: &failures.last().unwrap().plan,
            failures,
            tried: &tried,
            prior: &super::Prior::none(),
        },
        &mut notes,
    );
    (next, notes)
}

/// What the planner does after `written` failed once with `class` and `facts`.
fn decide_once(
    setup: &Setup,
    written: &Plan,
    class: FailureClass,
    facts: MemoryFacts,
) -> (Next, Vec<String>) {
    decide(setup, written, &[failed(written, class, facts)])
}

/// The estimator says `plan` fits its card.
fn predicted_to_fit(setup: &Setup, plan: &Plan) -> bool {
    let estimator = Estimator::new(setup, plan).unwrap();
    estimator.estimate(setup, plan).estimate.failure.is_none()
}

fn moved(next: Next) -> Move {
    match next {
        Next::Move(m) => m,
        other => panic!("expected a move, got {other:?}"),
    }
}

fn value(plan: &Plan, key: &str) -> String {
    plan.overrides
        .get(key)
        .map(|s| crate::config::experiment::scalar_text(&s.value))
        .unwrap_or_default()
}

const MICRO: &str = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu";

/// A sweep's members that differ only in their seed share one preflight: the search runs once,
/// and the next member gets the same choice with its own seed and name, as if preflighted
/// alone. A member that differs in what preflight reads (a micro-batch, the prior) gets its
/// own.
#[test]
fn sweep_members_differing_only_in_seed_share_one_preflight() {
    let calls = std::cell::Cell::new(0);
    let ask = |preflights: &mut Preflights, setup: &Setup, written: &Plan, prior: &Prior| {
        let estimator = Estimator::new(setup, written).unwrap();
        preflights.answer(setup, &estimator, written, prior, || {
            calls.set(calls.get() + 1);
            let mut lines = Vec::new();
            let chosen = preflight(setup, &estimator, written, &mut lines);
            Answer { chosen, lines }
        })
    };
    let mut preflights = Preflights::new();
    let (setup0, written0) = load("diamonds-seed0", "h100-80g", &[]);
    let (setup1, written1) = load("diamonds-seed1", "h100-80g", &[]);
    let first = ask(&mut preflights, &setup0, &written0, &Prior::none());
    let shared = ask(&mut preflights, &setup1, &written1, &Prior::none());
    assert_eq!((calls.get(), preflights.computed()), (1, 1));
    let first = first.chosen.expect("seed 0 is moved");
    let shared = shared.chosen.expect("seed 1 is moved");
    let alone = preflight(
        &setup1,
        &Estimator::new(&setup1, &written1).unwrap(),
        &written1,
        &mut Vec::new(),
    )
    .expect("seed 1 is moved alone too");
    assert_eq!(shared.plan, alone.plan);
    assert_eq!(
        (
            &shared.label,
            &shared.why,
            &shared.changes,
            shared.changes_semantics
        ),
        (
            &alone.label,
            &alone.why,
            &alone.changes,
            alone.changes_semantics
        )
    );
    assert_eq!(shared.plan.experiment, "diamonds-seed1");
    assert_eq!(value(&shared.plan, "data.seed"), "1");
    assert_eq!(
        value(&shared.plan, "trainer.experiment_name"),
        "diamonds-seed1"
    );
    assert_eq!(value(&first.plan, "data.seed"), "0");
    assert_ne!(first.plan, shared.plan);

    // Another micro-batch is another search; so is another prior.
    let (setup2, written2) = load("diamonds-seed2", "h100-80g", &[(MICRO, "16")]);
    ask(&mut preflights, &setup2, &written2, &Prior::none());
    assert_eq!(calls.get(), 2);
    let (setup3, written3) = load("diamonds-seed3", "h100-80g", &[]);
    let learned = Prior {
        attempts: 1,
        ..Prior::none()
    };
    ask(&mut preflights, &setup3, &written3, &learned);
    assert_eq!(calls.get(), 3);
    let (setup4, written4) = load("diamonds-seed4", "h100-80g", &[]);
    ask(&mut preflights, &setup4, &written4, &Prior::none());
    assert_eq!((calls.get(), preflights.computed()), (3, 3));
}

/// Seed 002: 1024/256/32 without offload needs 100 GiB+ per GPU on a 79.18 GiB card. Preflight
/// picks a configuration that trains the same thing on the same GPUs, and says why.
#[test]
fn seed_002_preflight_keeps_the_batch_and_the_gpus() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(estimator.knows_architecture());
    let as_written = estimator.estimate(&setup, &written);
    assert!(
        as_written.gpu_peak_gib() > 79.18,
        "{}",
        as_written.gpu_peak_gib()
    );
    let mut notes = Vec::new();
    let m = preflight(&setup, &estimator, &written, &mut notes).expect("a fitting plan");
    assert!(!m.changes_semantics, "{}", m.describe());
    assert_eq!(m.plan.resources.gpus, written.resources.gpus);
    assert_eq!(value(&m.plan, "data.train_batch_size"), "1024");
    assert!(predicted_to_fit(&setup, &m.plan));
    assert!(m.why.contains("predicted to need"), "{}", m.why);
}

/// Seed 002's plan is judged with orch's default lengths (diamonds has no `datasets/` entry):
/// the verdict says at what mean length it would turn, and that length is where it turns.
/// With the data's lengths known (GSM8K's, from `datasets/gsm8k.yaml`) or logged by an
/// attempt, nothing is assumed and nothing is said.
#[test]
fn a_verdict_on_assumed_lengths_says_where_it_turns() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    let as_written = estimator.estimate(&setup, &written);
    let turn = estimator
        .fits_below(&setup, &written, &as_written)
        .expect("a length it fits at");
    let seq_len = turn.assumed.seq_len as f64;
    assert_eq!(seq_len, 1536.0);
    assert!((turn.assumed.tokens_per_sequence / seq_len - 0.635).abs() < 1e-9);
    let fits_at = |tokens: f64| {
        let mut e = estimator.clone();
        e.set_sequence_tokens(Some(tokens));
        e.estimate(&setup, &written).estimate.fits()
    };
    assert!(turn.fits_below_tokens < turn.assumed.tokens_per_sequence);
    assert!(fits_at(turn.fits_below_tokens));
    assert!(!fits_at(turn.fits_below_tokens + 2.0));
    assert!((1..20).all(|i| fits_at(turn.fits_below_tokens * f64::from(i) / 20.0)));
    let mut notes = Vec::new();
    let m = preflight(&setup, &estimator, &written, &mut notes).expect("a fitting plan");
    let clause = format!(
        "it fits if a sequence averages at most {:.0} of its 1536 tokens; orch assumed 975",
        turn.fits_below_tokens
    );
    assert!(m.why.contains(&clause), "{}", m.why);

    // Lengths an attempt logged: nothing assumed.
    let mut logged = estimator.clone();
    logged.set_sequence_tokens(Some(1200.0));
    let at_logged = logged.estimate(&setup, &written);
    assert!(!at_logged.estimate.fits());
    assert_eq!(logged.fits_below(&setup, &written, &at_logged), None);
    // A dataset orch knows: nothing assumed either.
    let (setup, written) = load(
        "diamonds-seed0",
        "h100-80g",
        &[("data.train_files", "~/data/gsm8k/train.parquet")],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    let known = estimator.estimate(&setup, &written);
    assert_eq!(known.estimate.assumed_lengths, None);
    assert_eq!(estimator.fits_below(&setup, &written, &known), None);
}

/// With micro-batches packed to a token budget, shorter sequences can need more: the budget
/// fills one micro-batch where longer ones split into two smaller ones. The verdict turns more
/// than once, so no length is promised. Here (a 40,000-token budget over 256 + 280 tokens)
/// 100-token sequences do not fit, 150-token ones do.
#[test]
fn a_token_budget_promises_no_length() {
    let (setup, written) = load(
        "diamonds-seed0",
        "h100-80g",
        &[
            ("actor_rollout_ref.actor.use_dynamic_bsz", "true"),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "40000"),
            ("data.max_prompt_length", "256"),
            ("data.max_response_length", "280"),
        ],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    let as_written = estimator.estimate(&setup, &written);
    let assumed = as_written
        .estimate
        .assumed_lengths
        .expect("lengths assumed");
    assert!(!assumed.monotone);
    assert!(!as_written.estimate.fits());
    let fits_at = |tokens: f64| {
        let mut e = estimator.clone();
        e.set_sequence_tokens(Some(tokens));
        e.estimate(&setup, &written).estimate.fits()
    };
    assert!(!fits_at(100.0) && fits_at(150.0));
    assert_eq!(estimator.fits_below(&setup, &written, &as_written), None);
}

/// verl's own 14B tuning recipe (examples/tuning/14b, 4 × H800) as diamonds' overrides on
/// 4 × H100, on diamonds' data (the default share of the padded length): predicted a few GiB
/// over the card. Inside a band that admits it, preflight's message says it is submitted as
/// written; verl's shipped band (0 % since the H100 measurement) does not, and seed 002's plan
/// is rewritten "beyond verl's validated band".
#[test]
fn preflight_submits_as_written_inside_the_validated_band() {
    let recipe = [
        ("model", "Qwen/Qwen2.5-Coder-14B-Instruct"),
        ("data.max_prompt_length", "1024"),
        ("data.max_response_length", "1024"),
        (MICRO, "16"),
        ("actor_rollout_ref.actor.entropy_coeff", "0"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", "true"),
        (
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "true",
        ),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", "true"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "4"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.5"),
    ];
    let (setup, written) = load("diamonds-seed0", "h100-80g", &recipe);
    let estimator = Estimator::new(&setup, &written).unwrap();
    let as_written = estimator.estimate(&setup, &written);
    let capacity = setup.profile.gpu.memory_gib;
    assert!(
        as_written.estimate.failure.is_some(),
        "predicted over the card"
    );
    let over = as_written.gpu_peak_gib() / capacity - 1.0;
    assert!(over > 0.0 && over < 0.4, "{over}");
    let wide = Band {
        over_pct: 40,
        configurations: 1,
        tuning_right: 1,
        tuning_rows: 1,
        holdout_right: 0,
        holdout_rows: 0,
    };
    let note = within(&as_written, capacity, &wide).expect("inside a 40 % band");
    assert!(
        note.contains("within verl's validated band of ±40 %"),
        "{note}"
    );
    assert!(note.contains("submitting as written"), "{note}");
    let narrow = Band {
        over_pct: 0,
        ..wide
    };
    assert!(within(&as_written, capacity, &narrow).is_none());

    let (setup, seed) = load("diamonds-seed0", "h100-80g", &[]);
    let estimator = Estimator::new(&setup, &seed).unwrap();
    assert!(within_band(&estimator.estimate(&setup, &seed), capacity).is_none());
    let m = preflight(&setup, &estimator, &seed, &mut Vec::new()).expect("rewritten");
    assert!(m.why.contains("beyond verl's validated band"), "{}", m.why);
}

/// gsm8k-areal on one A100 40GB with SGLang at 0.85 of the card: as written over 60 GiB; the
/// smallest configuration that trains the same thing (checkpointing, smaller micro-batches,
/// SGLang lowered as far as the ladder goes) is predicted at 39.0 of 39.4 GiB, a fit without
/// the 4 % headroom. Preflight submits that rather than the plan as written: it is what the
/// loop would try once after the predicted OOM, without the failed attempt (and its queue
/// wait) first.
#[test]
fn preflight_takes_a_tight_fit_when_nothing_fits_with_headroom() {
    let (setup, written) = load(
        "gsm8k-areal",
        "a100-40g",
        &[("sglang.mem_fraction_static", "0.85")],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(estimator.estimate(&setup, &written).gpu_peak_gib() > 50.0);
    let mut notes = Vec::new();
    let m = preflight(&setup, &estimator, &written, &mut notes).expect("a tight fit");
    assert!(!m.changes_semantics, "{}", m.describe());
    assert!(predicted_to_fit(&setup, &m.plan));
    let peak = estimator.estimate(&setup, &m.plan).gpu_peak_gib();
    let capacity = setup.profile.gpu.memory_gib;
    assert!(peak > capacity * 0.96 && peak <= capacity, "{peak}");
    assert!(
        notes
            .iter()
            .any(|n| n
                .starts_with("nothing fits with 4 % headroom; taking one that fits without it")),
        "{notes:?}"
    );
}

/// A plan predicted to fit needs no preflight.
#[test]
fn preflight_leaves_a_fitting_plan_alone() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[(MICRO, "4")]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(preflight(&setup, &estimator, &written, &mut Vec::new()).is_none());
}

/// Seed 002's OOM, with 4.08 GiB reserved-but-unallocated next to a 17.68 GiB request: no
/// allocator setting, no semantics change, no batch halving; one move that fits.
#[test]
fn seed_002_failure_is_answered_by_one_fitting_move() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let facts = torch_oom(17.68, 3.92, 79.18, 68.68, 4.08);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    // verl's ladder has no allocator step (vLLM's sleep mode refuses expandable segments).
    assert!(
        !m.plan.steps.iter().any(|s| s == "expandable-segments"),
        "{notes:?}"
    );
    assert!(!m.changes_semantics, "{}", m.describe());
    assert!(!m.plan.steps.iter().any(|s| s == "halve-batches"));
    assert!(predicted_to_fit(&setup, &m.plan));
}

/// 11 MiB reserved-but-unallocated: `expandable_segments` cannot answer this failure alone, so
/// no plan that takes it alone is a move (torchrun's ladder offers it; verl's does not).
#[test]
fn allocator_setting_is_passed_over_when_fragmentation_is_small() {
    let (setup, written) = load("pretrain-512m", "h100-80g", &[]);
    let facts = torch_oom(2.21, 0.5, 79.18, 78.0, 0.011);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(
        m.plan.steps.iter().any(|s| s != "expandable-segments"),
        "{}",
        m.describe()
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("expandable-segments alone passed over")),
        "{notes:?}"
    );
}

/// orch driving examples/torchrun/train.py on a real H100 (crates/orch-core/data/gpu-runs/):
/// Qwen2.5-0.5B at micro 16 × 2048 tokens without checkpointing died with torch's "Tried to
/// allocate 18.55 GiB … 17.38 GiB is free … 60.97 GiB is allocated by PyTorch, and 149.92 MiB
/// is reserved by PyTorch but unallocated". Fragmentation is ruled out, so expandable segments
/// alone are no answer; beside the halved micro batch they are what preflight picks, and on
/// the H100 that plan ran (71.0 GiB reserved, 67.8k tokens/s) where the checkpointed one the
/// planner took before ran at 55.0k.
#[test]
fn a_real_h100_oom_is_answered_with_expandable_segments_beside_the_halved_micro_batch() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("experiments")).unwrap();
    std::fs::write(
        dir.path().join("experiments/qwen05b.yaml"),
        "template: torchrun-yaml\nprofile: h100-80g\nladder: torchrun-yaml\nmodel: Qwen/Qwen2.5-0.5B\n\
         architecture: {model_type: qwen2, hidden_size: 896, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, intermediate_size: 4864, vocab_size: 151936, tie_word_embeddings: true}\n\
         resources: {gpus: 1}\n\
         overrides: {micro_batch_size: 16, gradient_accumulation_steps: 1, max_seq_len: 2048, gradient_checkpointing: false, precision: bf16}\n",
    )
    .unwrap();
    let catalog = Catalog::new(dir.path());
    let (setup, written) =
        Setup::load(&catalog, experiment(&catalog, "qwen05b"), None, &[]).unwrap();
    let facts = torch_oom(18.55, 17.38, 79.18, 60.97, 149.92 / 1024.0);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert_eq!(
        m.plan.steps,
        ["expandable-segments", "halve-micro-batch"],
        "{}\n{notes:?}",
        m.describe()
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("expandable-segments alone passed over")),
        "{notes:?}"
    );
}

/// Seed 003: micro 8 × 2048 on A40s. DDP memory per GPU does not depend on the GPU count, so
/// more GPUs are passed over; the move keeps the tokens per optimizer step.
#[test]
fn seed_003_torchrun_never_asks_for_more_gpus() {
    let (setup, written) = load("pretrain-512m", "a40", &[]);
    let facts = torch_oom(51.2, 1.0, 44.42, 40.0, 0.5);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(
        notes.iter().any(|n| n.starts_with("passed over more-gpus")),
        "{notes:?}"
    );
    assert_eq!(m.plan.resources.gpus, written.resources.gpus);
    assert_eq!(
        m.plan.semantics(&setup),
        written.semantics(&setup),
        "{}",
        m.describe()
    );
}

/// A GPU count that changes the global batch changes what is trained (torchrun).
#[test]
fn more_gpus_change_torchrun_semantics() {
    let (setup, written) = load("pretrain-512m", "a40", &[]);
    let mut more = written.clone();
    more.resources.gpus *= 2;
    assert_ne!(more.semantics(&setup), written.semantics(&setup));
    let (vsetup, vwritten) = load("diamonds-seed0", "h100-80g", &[]);
    let mut vmore = vwritten.clone();
    vmore.resources.gpus = 8;
    assert_eq!(vmore.semantics(&vsetup), vwritten.semantics(&vsetup));
}

/// vLLM's start-up check failed: trainer-side cuts cannot change what vLLM finds free.
#[test]
fn rollout_startup_failure_gets_no_trainer_side_cut() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[(MICRO, "4")]);
    let facts = MemoryFacts {
        capacity_gib: Some(79.18),
        free_gib: Some(40.0),
        desired_utilization: Some(0.6),
        desired_gib: Some(47.5),
        stage: Some(Stage::RolloutStartup),
        ..MemoryFacts::default()
    };
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert_eq!(value(&m.plan, MICRO), "4", "{}", m.describe());
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("passed over halve-micro-batch")),
        "{notes:?}"
    );
}

/// The same failure with the same numbers after a semantics change: the change missed the
/// cause and is undone.
#[test]
fn a_semantics_change_that_did_not_help_is_undone() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let step = setup
        .ladder
        .steps
        .iter()
        .find(|s| s.name == "halve-batches")
        .unwrap();
    let (halved, _) = written.apply(step, &setup).unwrap().unwrap();
    let facts = torch_oom(17.68, 3.92, 79.18, 68.68, 4.08);
    let failures = [
        failed(&written, FailureClass::GpuOom, facts.clone()),
        failed(&halved, FailureClass::GpuOom, facts),
    ];
    let (next, notes) = decide(&setup, &written, &failures);
    let m = moved(next);
    assert!(
        !m.plan.steps.iter().any(|s| s == "halve-batches"),
        "{}",
        m.describe()
    );
    assert!(
        notes.iter().any(|n| n.starts_with("undoing halve-batches")),
        "{notes:?}"
    );
    assert!(!m.changes_semantics);
}

/// Seed 000: AReaL's own SGLang server holds 36.34 GiB of a 44.42 GiB A40 (another process
/// to torch). That is the job's, so it is not a stranger: the move gives the trainer more of
/// the card.
#[test]
fn seed_000_the_jobs_own_sglang_server_is_not_a_stranger() {
    let (setup, written) = load("gsm8k-areal", "a40", &[]);
    let facts = MemoryFacts {
        other_processes: vec![ProcessUse {
            pid: 4242,
            gib: 36.34,
        }],
        ..torch_oom(0.085, 0.056, 44.42, 6.89, 0.136)
    };
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(!m.changes_semantics, "{} {notes:?}", m.describe());
}

/// What the planner learns from one GPU OOM of the demo as written on an H100, the run stating
/// verl `release`.
fn learned_from_a_demo_oom_on_an_h100(
    release: Option<&str>,
    facts: MemoryFacts,
) -> super::evidence::Learned {
    let (mut setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    setup.experiment.file.trainer_version = release.map(|r| r.parse().unwrap());
    let estimator = Estimator::new(&setup, &written).unwrap();
    let failure = failed(&written, FailureClass::GpuOom, facts);
    super::evidence::Learned::from_failures_after(
        super::evidence::Learned::nothing(),
        &[failure],
        79.18,
        |p| estimator.estimate(&setup, p),
    )
}

/// verl 0.8's vLLM is a process of its own: a training OOM lists the asleep engine ("Process N
/// has 1.50 GiB"), which is the job's own, so the card is not taken for smaller; a verl that
/// does not say its release keeps vLLM in the worker, so a process listed is someone else's.
#[test]
fn verl_08s_own_vllm_process_is_not_a_stranger() {
    let unavailable = |release: Option<&str>| {
        let facts = MemoryFacts {
            other_processes: vec![ProcessUse { pid: 77, gib: 1.5 }],
            ..torch_oom(8.84, 1.32, 79.18, 75.0, 0.5)
        };
        learned_from_a_demo_oom_on_an_h100(release, facts).unavailable_gib
    };
    assert_eq!(unavailable(Some("0.8.0")), 0.0);
    assert_eq!(unavailable(None), 1.5);
}

/// The same OOM, stated by a verl that keeps vLLM in the worker (the engine's 1.5 GiB in "this
/// process") and by verl 0.8 (listed apart, this process 1.5 GiB less), scales the
/// predictions alike: the job's own engine is part of the training demand either way.
#[test]
fn verl_08s_listed_engine_still_counts_in_the_training_demand() {
    let scale = |release: &str, facts: MemoryFacts| {
        learned_from_a_demo_oom_on_an_h100(Some(release), facts).scale
    };
    let inside = torch_oom(20.0, 0.5, 79.18, 75.0, 0.5);
    let apart = MemoryFacts {
        other_processes: vec![ProcessUse { pid: 7, gib: 1.5 }],
        process_in_use_gib: inside.process_in_use_gib.map(|g| g - 1.5),
        ..inside.clone()
    };
    let (a, b) = (scale("0.7.0", inside), scale("0.8.0", apart));
    assert!(a > 1.0 && (a - b).abs() < 1e-9, "{a} {b}");
}

/// Another program holds 30 GiB of an A40 that a torchrun job needs most of: nothing orch may
/// change fits in what is left, so it stops at once, naming the process.
#[test]
fn another_program_on_the_card_stops_the_run() {
    let (setup, written) = load("pretrain-512m", "a40", &[]);
    let facts = MemoryFacts {
        other_processes: vec![ProcessUse {
            pid: 4242,
            gib: 40.0,
        }],
        ..torch_oom(1.2, 0.2, 44.42, 3.0, 0.1)
    };
    let (next, _) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    match next {
        Next::GiveUp { reason } => {
            assert!(reason.contains("process 4242 holds 40.00 GiB"), "{reason}");
        }
        other => panic!("expected the run to stop, got {other:?}"),
    }
}

/// A failure the estimator did not predict scales every prediction up.
#[test]
fn an_unpredicted_failure_calibrates_the_estimate() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[(MICRO, "4")]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(predicted_to_fit(&setup, &written));
    let facts = torch_oom(6.0, 1.0, 79.18, 75.0, 0.5);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    assert!(
        notes.iter().any(|n| n.contains("predictions scaled")),
        "{notes:?}"
    );
    let m = moved(next);
    let peak = estimator.estimate(&setup, &m.plan).gpu_peak_gib();
    assert!(peak < estimator.estimate(&setup, &written).gpu_peak_gib());
}

/// Nothing fits an RTX 4090: one try of the most conservative plan, then stop.
#[test]
fn nothing_fits_tries_once_then_stops() {
    let (setup, written) = load("pretrain-512m", "rtx4090", &[]);
    let facts = torch_oom(17.68, 0.5, 23.5, 22.0, 0.3);
    let first = [failed(&written, FailureClass::GpuOom, facts.clone())];
    let m = moved(decide(&setup, &written, &first).0);
    assert!(m.why.contains("nothing is predicted to fit"), "{}", m.why);
    let second = [
        first[0].clone(),
        failed(&m.plan, FailureClass::GpuOom, facts),
    ];
    match decide(&setup, &written, &second).0 {
        Next::GiveUp { reason } => assert!(
            reason.contains("predicted to fit") || reason.contains("is exhausted"),
            "{reason}"
        ),
        other => panic!("expected the run to stop, got {other:?}"),
    }
}

/// The same evidence gives the same decision (a restarted orch decides again).
#[test]
fn decisions_are_deterministic() {
    let (setup, written) = load("gsm8k-areal", "a40", &[]);
    let facts = torch_oom(2.0, 0.4, 44.42, 40.0, 0.2);
    let failures = [failed(&written, FailureClass::GpuOom, facts)];
    let a = moved(decide(&setup, &written, &failures).0);
    let b = moved(decide(&setup, &written, &failures).0);
    assert_eq!(a.plan, b.plan);
    assert_eq!(a.why, b.why);
}

/// Scheduler failures resume the same plan.
#[test]
fn a_preemption_resumes_the_same_plan() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let f = Failure {
        plan: written.clone(),
        class: FailureClass::Preempted,
        facts: None,
    };
    match decide(&setup, &written, &[f]).0 {
        Next::Resume { plan, .. } => assert!(plan.resume),
        other => panic!("expected a resume, got {other:?}"),
    }
}

/// The throughput model's prediction for the demo experiment on `profile` with `sets`.
fn diamonds_throughput(profile: &str, sets: &[(&str, &str)]) -> throughput::Throughput {
    let (setup, plan) = load("diamonds-seed0", profile, sets);
    let e = Estimator::new(&setup, &plan)
        .unwrap()
        .estimate(&setup, &plan);
    throughput::predict(&e, plan.resources.gpus, setup.profile.gpu.memory_gib)
}

/// The throughput model's directions: recompute and offload cost time, parameter offload
/// more than optimizer offload, larger micro-batches are faster.
#[test]
fn throughput_model_directions() {
    let at = |sets: &[(&str, &str)]| diamonds_throughput("h200", sets).relative;
    let ckpt = "actor_rollout_ref.model.enable_gradient_checkpointing";
    let param = "actor_rollout_ref.actor.fsdp_config.param_offload";
    let optim = "actor_rollout_ref.actor.fsdp_config.optimizer_offload";
    let base = at(&[(MICRO, "8"), (ckpt, "false")]);
    assert!(at(&[(MICRO, "8"), (ckpt, "true")]) < base);
    assert!(at(&[(MICRO, "1"), (ckpt, "false")]) < base);
    assert!(
        at(&[(MICRO, "8"), (ckpt, "false"), (param, "true")])
            < at(&[(MICRO, "8"), (ckpt, "false"), (optim, "true")])
    );
}

/// Rollout tensor parallelism costs time where the KV cache already holds the rollout (an
/// H200 at vLLM's 0.6: the engines only synchronise more), and pays where the cache is what
/// limits (an L40S at 0.3: twice the cache per GPU).
#[test]
fn rollout_tensor_parallelism_pays_only_where_the_kv_cache_limits() {
    let tp = "actor_rollout_ref.rollout.tensor_model_parallel_size";
    let util = "actor_rollout_ref.rollout.gpu_memory_utilization";
    let at = |profile: &str, sets: &[(&str, &str)]| {
        let t = diamonds_throughput(profile, sets);
        (t.relative, t.costs)
    };
    let (one, c1) = at("h200", &[(tp, "1")]);
    let (two, c2) = at("h200", &[(tp, "2")]);
    assert!(two < one, "{two} >= {one}\n{c1:?}\n{c2:?}");
    assert!(
        c2.iter()
            .any(|(what, f)| what.contains("tensor parallel") && (*f - 1.0 / 0.7).abs() < 1e-9),
        "{c2:?}"
    );
    let (one, c1) = at("l40s", &[(tp, "1"), (util, "0.3")]);
    let (two, c2) = at("l40s", &[(tp, "2"), (util, "0.3")]);
    assert!(two > one, "{two} <= {one}\n{c1:?}\n{c2:?}");
}

/// vLLM decodes at most `max_num_seqs` sequences at once per engine (256 by verl's default):
/// a KV cache that holds more of them buys no speed, so on an A100 80GB raising vLLM's share
/// changes nothing at the default, and speeds the rollout when far more may be in flight.
#[test]
fn a_kv_cache_larger_than_max_num_seqs_needs_buys_nothing() {
    let util = "actor_rollout_ref.rollout.gpu_memory_utilization";
    let seqs = "actor_rollout_ref.rollout.max_num_seqs";
    let at = |sets: &[(&str, &str)]| diamonds_throughput("a100-80g", sets).relative;
    let (low, high) = (at(&[(util, "0.6")]), at(&[(util, "0.8")]));
    assert!((low - high).abs() < 1e-12, "{low} {high}");
    let (low, high) = (
        at(&[(util, "0.6"), (seqs, "8192")]),
        at(&[(util, "0.8"), (seqs, "8192")]),
    );
    assert!(high > low * 1.05, "{low} {high}");
}

/// A host-memory kill (Slurm's cgroup) is answered by asking for more memory: the failing
/// quantity is the shortfall against the job's `--mem`, which a bigger request lowers even
/// though the job's own need is unchanged.
#[test]
fn a_host_oom_gets_more_host_memory() {
    let (setup, written) = load("diamonds-seed0", "a40", &[("resources.mem_gb", "8")]);
    let f = Failure {
        plan: written.clone(),
        class: FailureClass::HostOom,
        facts: None,
    };
    let (next, notes) = decide(&setup, &written, &[f]);
    let m = moved(next);
    assert!(
        m.plan.resources.mem_gb > written.resources.mem_gb,
        "{}\n{notes:?}",
        m.describe()
    );
    assert!(
        !notes
            .iter()
            .any(|n| n.contains("passed over more-host-memory")),
        "{notes:?}"
    );
}

/// When no combination of the steps answering the failure fits, the ladder's other memory
/// steps join the menu (as in preflight): on a 24 GiB card the 7B GRPO run needs offload,
/// which needs host memory, and a shorter rollout — a semantics change, marked as one.
#[test]
fn the_menu_widens_to_every_memory_step_before_giving_up() {
    let (mut setup, written) = load("diamonds-seed0", "rtx4090", &[]);
    // verl 0.6: training with expandable segments, which verl turns on itself.
    setup.experiment.file.trainer_version = Some("0.6.1".parse().unwrap());
    let facts = torch_oom(17.68, 0.5, 23.5, 22.0, 0.3);
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("adding the ladder's other memory steps")),
        "{notes:?}"
    );
    assert!(m.changes_semantics, "{}", m.describe());
    assert!(predicted_to_fit(&setup, &m.plan));
}

/// When nothing that trains the same thing fits, the plan that changes the fewest of the
/// written plan's semantic values wins over a faster one that changes more.
#[test]
fn a_forced_semantics_change_changes_as_little_as_it_can() {
    let (mut setup, written) = load("diamonds-seed0", "rtx4090", &[]);
    setup.experiment.file.trainer_version = Some("0.6.1".parse().unwrap());
    let facts = MemoryFacts {
        desired_utilization: Some(0.6),
        desired_gib: Some(14.19),
        free_gib: Some(12.01),
        capacity_gib: Some(23.65),
        ..MemoryFacts::default()
    };
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(m.changes_semantics, "{}", m.describe());
    let changed =
        crate::plan::semantic_changes(&written.semantics(&setup), &m.plan.semantics(&setup));
    assert_eq!(changed.len(), 1, "{changed:?}\n{notes:?}");
}

const RS_MODEL: &str = "game_manager.trainer.models.0.pretrained_model_name_or_path";

/// Seed 004: the rl-swarm node as first run (float32, no checkpointing, 1.5B) on an RTX 4090.
/// Preflight keeps the model and the samples per update, and takes fp16 with checkpointing.
#[test]
fn seed_004_rl_swarm_preflight_takes_fp16_and_checkpointing() {
    let (setup, written) = load("rl-swarm-qwen", "rtx4090", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(estimator.knows_architecture());
    assert!(!predicted_to_fit(&setup, &written));
    let m = preflight(&setup, &estimator, &written, &mut Vec::new()).expect("a fitting plan");
    assert!(!m.changes_semantics, "{}", m.describe());
    assert_eq!(m.plan.semantics(&setup), written.semantics(&setup));
    assert_eq!(value(&m.plan, "training.dtype"), "float16");
    assert_eq!(
        value(
            &m.plan,
            "++game_manager.trainer.config.enable_gradient_checkpointing"
        ),
        "true"
    );
    assert_eq!(value(&m.plan, RS_MODEL), "Gensyn/Qwen2.5-1.5B-Instruct");
    assert!(predicted_to_fit(&setup, &m.plan));
}

/// A plan that names another model (rl-swarm's smaller-model step) is estimated with that
/// model's architecture, not the experiment's, and trains something else.
#[test]
fn a_plan_naming_another_model_is_estimated_with_it() {
    let (setup, written) = load("rl-swarm-qwen", "rtx4090", &[]);
    let (_, smaller) = load(
        "rl-swarm-qwen",
        "rtx4090",
        &[(RS_MODEL, "Gensyn/Qwen2.5-0.5B-Instruct")],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    let big = estimator.estimate(&setup, &written);
    let small = estimator.estimate(&setup, &smaller);
    assert_eq!(small.model, "Gensyn/Qwen2.5-0.5B-Instruct");
    match &small.architecture {
        crate::estimate::Architecture::Known { params, .. } => {
            assert!((0.45e9..0.55e9).contains(params), "{params}")
        }
        other => panic!("{other:?}"),
    }
    assert!(small.gpu_peak_gib() < big.gpu_peak_gib() / 2.0);
    assert_ne!(smaller.semantics(&setup), written.semantics(&setup));
}

/// The real sequence length an earlier attempt logged (verl's prompt + response length means,
/// through the evidence prior) replaces the default share of the padded length: shorter real
/// sequences make the same micro-batch smaller, and preflight keeps a larger one.
#[test]
fn logged_sequence_lengths_shrink_the_micro_batch_preflight_plans_for() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let mut estimator = Estimator::new(&setup, &written).unwrap();
    let default = estimator.estimate(&setup, &written);
    // diamonds: 512 + 1024 padded; the default packs 0.635 of it, 975 tokens a sequence.
    assert!((default.estimate.tokens_per_micro - 32.0 * 1536.0 * 0.635).abs() < 1.0);
    let default_pick = preflight(&setup, &estimator, &written, &mut Vec::new()).unwrap();
    estimator.set_sequence_tokens(Some(500.0));
    let logged = estimator.estimate(&setup, &written);
    assert!((logged.estimate.tokens_per_micro - 32.0 * 500.0).abs() < 1.0);
    assert!(logged.gpu_peak_gib() < default.gpu_peak_gib());
    let logged_pick = preflight(&setup, &estimator, &written, &mut Vec::new());
    let micro = |m: &Option<Move>| {
        m.as_ref()
            .map_or(32, |m| value(&m.plan, MICRO).parse::<u64>().unwrap())
    };
    assert!(
        micro(&logged_pick) > micro(&Some(default_pick.clone())),
        "{:?} vs {}",
        logged_pick.map(|m| m.describe()),
        default_pick.describe()
    );
}

/// A node a failure excluded stays excluded when a later failure moves the run down the ladder
/// (candidates are built from the plan as written, which names no such node).
#[test]
fn a_move_keeps_the_nodes_a_failure_excluded() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let mut current = written.clone();
    current.resources.exclude.push("gpu-node-7".into());
    let facts = torch_oom(17.68, 3.92, 79.18, 68.68, 4.08);
    let (next, _) = decide(
        &setup,
        &written,
        &[failed(&current, FailureClass::GpuOom, facts)],
    );
    let m = moved(next);
    assert_eq!(m.plan.resources.exclude, ["gpu-node-7"], "{}", m.describe());
    assert!(
        !m.changes.iter().any(|c| c.key.contains("exclude")),
        "{}",
        m.describe()
    );
}

/// The ladder's configuration `counts` away from the plan as written (each step's count in
/// ladder order, the steps after them not taken).
fn candidate(setup: &Setup, written: &Plan, counts: &[u32]) -> Plan {
    let ranges = super::ranges_answering(setup, &super::MEMORY_CLASSES);
    super::space::enumerate(setup, written, &ranges, &HashSet::new())
        .into_iter()
        .find(|c| {
            c.counts.iter().zip(counts).all(|(a, b)| a == b)
                && c.counts[counts.len()..].iter().all(|n| *n == 0)
        })
        .unwrap()
        .plan
}

/// What the evidence store would hold after `plan` ran (`reserved`: its measured peak) or ran
/// out of memory (None), with the prediction the run would have recorded.
fn observed(
    setup: &Setup,
    estimator: &Estimator,
    plan: &Plan,
    reserved: Option<f64>,
) -> crate::evidence_store::Observation {
    let (outcome, measured) = match reserved {
        Some(r) => (
            crate::outcome::Outcome::Succeeded,
            Some(orch_classify::Measured {
                peak_reserved_gib: Some(r),
                steps: Some(10),
                ..Default::default()
            }),
        ),
        None => (crate::outcome::Outcome::Failed(FailureClass::GpuOom), None),
    };
    crate::evidence_store::observe(
        setup,
        plan,
        estimator,
        false,
        crate::evidence_store::Attempt {
            run: "earlier",
            attempt: 1,
            outcome,
            predicted: Some(estimator.predicted_memory(setup, plan, None)),
            measured,
            facts: None,
        },
    )
    .unwrap()
}

/// A stand-in shape (seed 003's fit scaled to 512M parameters) whose static part is 5 % low
/// and whose token part is 4 × too high: the truth is `1.05 × static + 0.25 × tokens` of the
/// estimate. One measured peak scales the whole estimate by the larger ratio (×0.82 at micro
/// batch 1), which still predicts micro batch 4 at 60 GiB on the 44.4 GiB A40: preflight
/// stops at micro batch 2. Two measured peaks (micro 1 and 2) tell the parts apart, and micro
/// batch 4 — 40.9 GiB in truth — is predicted to fit and taken.
#[test]
fn two_measured_peaks_calibrate_the_static_and_token_parts_apart() {
    let (setup, written) = load(
        "pretrain-512m",
        "a40",
        &[("env.PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    assert!(!estimator.knows_architecture());
    let truth = |plan: &Plan| {
        let e = estimator.estimate(&setup, plan).estimate;
        let fixed = e.train_static.unwrap().reserved_gib;
        1.05 * fixed + 0.25 * (e.train_reserved_gib - fixed)
    };
    let (micro4, micro2, micro1) = (
        // torchrun-yaml: expandable-segments, gradient-checkpointing, halve-micro-batch, …
        candidate(&setup, &written, &[0, 0, 1]),
        candidate(&setup, &written, &[0, 0, 2]),
        candidate(&setup, &written, &[0, 0, 3]),
    );
    assert_eq!(value(&micro4, "micro_batch_size"), "4");
    let reserved = |p: &Plan| Some((truth(p) * 100.0).round() / 100.0);
    let preflight_after = |obs: &[crate::evidence_store::Observation]| {
        let prior = super::Prior::from_observations(
            obs,
            super::prior::Reports::of(orch_memory::estimate::Trainer::Torchrun),
            None,
        );
        let mut notes = Vec::new();
        let chosen = super::preflight_with(&setup, &estimator, &written, &prior, &mut notes)
            .unwrap_or_else(|| panic!("no move: {notes:?}"));
        (prior, chosen, notes)
    };

    // One measured peak: the single scale, as before.
    let (prior, chosen, _) =
        preflight_after(&[observed(&setup, &estimator, &micro1, reserved(&micro1))]);
    assert_eq!(prior.split, None);
    assert_eq!(
        value(&chosen.plan, "micro_batch_size"),
        "2",
        "{}",
        chosen.describe()
    );

    // Two: the parts apart, and the larger micro batch that fits in truth.
    let two = [
        observed(&setup, &estimator, &micro1, reserved(&micro1)),
        observed(&setup, &estimator, &micro2, reserved(&micro2)),
    ];
    let (prior, chosen, notes) = preflight_after(&two);
    let split = prior.split.expect("two peaks with different token parts");
    assert!(
        (split.fixed - 1.05).abs() < 0.01 && (split.tokens - 0.25).abs() < 0.01,
        "{split:?}"
    );
    assert_eq!(
        value(&chosen.plan, "micro_batch_size"),
        "4",
        "{}",
        chosen.describe()
    );
    assert!(truth(&micro4) < setup.profile.gpu.memory_gib * (1.0 - super::MARGIN_KNOWN));
    assert!(
        notes.iter().any(|n| n.contains("token part ×0.25")),
        "{notes:?}"
    );

    // Micro batch 4 then ran out of memory here after all: never again, and the split is
    // raised until it predicts that failure.
    let mut with_oom = two.to_vec();
    with_oom.push(observed(&setup, &estimator, &micro4, None));
    let (prior, chosen, _) = preflight_after(&with_oom);
    let raised = prior.split.unwrap();
    let e = estimator.estimate(&setup, &micro4);
    let mut learned = super::evidence::Learned::from_prior(&prior);
    learned.split = Some(raised);
    assert!(
        e.gpu_peak_gib() * learned.factor(&e) >= setup.profile.gpu.memory_gib - 0.01,
        "{raised:?}"
    );

    assert_eq!(
        value(&chosen.plan, "micro_batch_size"),
        "2",
        "{}",
        chosen.describe()
    );
}

/// A climbed attempt climbs again: the run stepped down to micro batch 1 (the stand-in of the
/// test above, truth `1.05 × static + 0.25 × tokens`), climbed to micro batch 2 on one scale,
/// and micro batch 2 runs. Its measured peak with the one micro batch 1 left calibrates the two
/// parts apart, and micro batch 4 — which fits in truth, and which one scale from either peak
/// predicts at more than 51 GiB on the 44.4 GiB A40 — is the next climb.
#[test]
fn a_climbed_attempt_climbs_again_once_two_peaks_tell_the_parts_apart() {
    let (setup, written) = load("pretrain-512m", "a40", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    let truth = |plan: &Plan| {
        let e = estimator.estimate(&setup, plan).estimate;
        let fixed = e.train_static.unwrap().reserved_gib;
        ((1.05 * fixed + 0.25 * (e.train_reserved_gib - fixed)) * 100.0).round() / 100.0
    };
    let micro2 = candidate(&setup, &written, &[0, 0, 2]);
    let micro1 = candidate(&setup, &written, &[0, 0, 3]);
    let running = observed(&setup, &estimator, &micro2, Some(truth(&micro2)));
    let spec = setup.template.spec.climb.clone().unwrap();
    let pace = super::climb::Pace {
        step: 120,
        total: 2000,
        step_s: 2.0,
        startup_s: Some(60.0),
        startup_bound_s: None,
        queue_s: 0.0,
        checkpoint_every: 50,
        peak_gib: truth(&micro2),
    };
    let tried: HashSet<String> = [&written, &micro1, &micro2]
        .iter()
        .map(|p| p.canonical(&setup))
        .collect();
    let climb_with = |obs: &[crate::evidence_store::Observation]| {
        let prior = super::Prior::from_observations(
            obs,
            super::prior::Reports::of(orch_memory::estimate::Trainer::Torchrun),
            None,
        );
        let mut notes = Vec::new();
        let climb = super::climb::climb(
            &Context {
                setup: &setup,
                estimator: Some(&estimator),
                written: &written,
                current: &micro2,
                failures: &[],
                tried: &tried,
                prior: &prior,
            },
            &spec,
            &pace,
            &mut notes,
        );
        (climb, notes)
    };
    // The running attempt's peak alone: one scale, nothing faster predicted to fit.
    let (climb, notes) = climb_with(std::slice::from_ref(&running));
    assert!(climb.is_none(), "{notes:?}");
    // With the peak micro batch 1 measured before it: micro batch 4.
    let earlier = observed(&setup, &estimator, &micro1, Some(truth(&micro1)));
    let (climb, notes) = climb_with(&[earlier, running]);
    let climb = climb.unwrap_or_else(|| panic!("no climb: {notes:?}"));
    assert_eq!(
        value(&climb.to.plan, "micro_batch_size"),
        "4",
        "{}",
        climb.to.describe()
    );
    assert!(climb.value.expected_s > 0.0, "{:?}", climb.value);
}

const DYNAMIC: &str = "actor_rollout_ref.actor.use_dynamic_bsz";
const BUDGET: &str = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu";

/// With `use_dynamic_bsz` verl packs micro-batches by `ppo_max_token_len_per_gpu` and ignores
/// the micro-batch sizes: halving those changes nothing the estimate sees, halving the budget
/// does. Diamonds with a budget of 32 whole sequences (32 × 1536 tokens) on 4 × H100.
#[test]
fn a_dynamic_batch_is_cut_by_its_token_budget_not_its_micro_batch() {
    let (setup, written) = load(
        "diamonds-seed0",
        "h100-80g",
        &[(DYNAMIC, "true"), (BUDGET, "49152")],
    );
    let estimator = Estimator::new(&setup, &written).unwrap();
    let as_written = estimator.estimate(&setup, &written);
    assert!(
        as_written.estimate.failure.is_some(),
        "{}",
        as_written.gpu_peak_gib()
    );
    let facts = MemoryFacts {
        capacity_gib: Some(79.18),
        ..MemoryFacts::default()
    };
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert!(
        m.plan.steps.iter().any(|s| s == "halve-token-budget"),
        "{} {notes:?}",
        m.describe()
    );
    assert!(
        !m.plan.steps.iter().any(|s| s == "halve-micro-batch"),
        "{} {notes:?}",
        m.describe()
    );
    assert!(!m.changes_semantics, "{}", m.describe());
    let budget: u64 = value(&m.plan, BUDGET).parse().unwrap();
    assert!((1536..49152).contains(&budget), "{budget}");
    assert!(predicted_to_fit(&setup, &m.plan), "{}", m.describe());
}

/// Without `use_dynamic_bsz` the token budget is not what verl batches by: the step does not
/// apply (its `when:`), and a budget too small for one sequence is refused before submission
/// only where verl would read it.
#[test]
fn the_token_budget_step_applies_only_to_dynamic_batches() {
    let (setup, written) = load("diamonds-seed0", "h100-80g", &[]);
    let step = setup
        .ladder
        .steps
        .iter()
        .find(|s| s.name == "halve-token-budget")
        .expect("verl-grpo's ladder has the step");
    assert!(written.apply(step, &setup).unwrap().is_none());
    let (setup, dynamic) = load("diamonds-seed0", "h100-80g", &[(DYNAMIC, "true")]);
    assert!(dynamic.apply(step, &setup).unwrap().is_some());
    // 1024 tokens cannot hold a 512 + 1024 sequence: verl asserts it after the first rollout.
    let (setup, small) = load(
        "diamonds-seed0",
        "h100-80g",
        &[(DYNAMIC, "true"), (BUDGET, "1024")],
    );
    let err = small.check(&setup).unwrap_err().to_string();
    assert!(err.contains("token-budget-holds-a-sequence"), "{err}");
    let (setup, fixed) = load("diamonds-seed0", "h100-80g", &[(BUDGET, "1024")]);
    assert!(fixed.check(&setup).is_ok());
}

/// A `when:` that cannot be read on the configuration (a misspelt key) is refused when the
/// setup loads, naming the ladder file and the step, rather than leaving its step out of every
/// search without a word.
#[test]
fn a_when_that_cannot_be_read_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ladders")).unwrap();
    std::fs::write(
        dir.path().join("ladders/verl-grpo.yaml"),
        "steps:\n  - name: halve-token-budget\n    answers: [gpu_oom]\n    when: actor_rollout_ref.actor.use_dynamik_bsz\n    overrides:\n      actor_rollout_ref.actor.ppo_max_token_len_per_gpu: {divide: 2}\n",
    )
    .unwrap();
    let catalog = Catalog::new(dir.path());
    let experiment = experiment(&catalog, "diamonds-seed0");
    let Err(err) = Setup::load(&catalog, experiment, Some("h100-80g"), &[]) else {
        panic!("a when: over a missing key was accepted");
    };
    let err = err.to_string();
    assert!(err.contains("ladders/verl-grpo.yaml"), "{err}");
    assert!(err.contains("halve-token-budget"), "{err}");
    assert!(err.contains("use_dynamik_bsz"), "{err}");
}

/// verl-grpo's whole ladder is searched uncut, with dynamic batches and without: its two
/// halving steps never both apply.
#[test]
fn verl_grpos_whole_space_is_searched_uncut() {
    for sets in [&[][..], &[(DYNAMIC, "true")][..]] {
        let (setup, written) = load("diamonds-seed0", "h100-80g", sets);
        let size: u64 = setup
            .ladder
            .steps
            .iter()
            .filter(|s| written.meets(s, &setup).unwrap())
            .map(|s| u64::from(s.repeat) + 1)
            .product();
        assert!(size <= super::space::MAX_COMBINATIONS, "{sets:?}: {size}");
    }
}

/// At verl's default `max_num_seqs` (256) a smaller KV cache costs the rollout little, so on
/// four A40s preflight lowers vLLM's memory rather than offload the actor (which would slow
/// every update), training the same thing on the same GPUs.
#[test]
fn on_four_a40s_preflight_lowers_vllm_memory_rather_than_offload() {
    let (setup, written) = load("diamonds-seed0", "a40", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    let m = preflight(&setup, &estimator, &written, &mut Vec::new()).expect("a fitting plan");
    assert!(!m.changes_semantics, "{}", m.describe());
    assert_eq!(m.plan.resources.gpus, written.resources.gpus);
    assert_eq!(
        value(&m.plan, "actor_rollout_ref.actor.fsdp_config.param_offload"),
        "false",
        "{}",
        m.describe()
    );
    assert!(
        value(&m.plan, "actor_rollout_ref.rollout.gpu_memory_utilization")
            .parse::<f64>()
            .unwrap()
            < 0.6,
        "{}",
        m.describe()
    );
}

/// The demo's actor-update OOM on four A40s: halving the micro-batch alone leaves vLLM unable to
/// wake up beside the optimizer state, and the offload that fixes that lowers nothing in the
/// update that failed, so it was passed over and the best move asked for eight GPUs. With the
/// steps for the failure judged together it stays on the four it was given. (With vLLM
/// decoding up to 1024 sequences at once, so that its KV cache is what limits the rollout and
/// a smaller one costs more than the offload: at verl's default 256 the cheaper move is to
/// lower vLLM's memory, which the first search finds on four GPUs by itself.)
#[test]
fn a_move_that_needs_more_gpus_comes_after_one_that_fits_the_written_ones() {
    let (setup, written) = load(
        "diamonds-seed0",
        "a40",
        &[("actor_rollout_ref.rollout.max_num_seqs", "1024")],
    );
    let facts = MemoryFacts {
        stage: Some(Stage::ActorUpdate),
        ..torch_oom(8.84, 6.15, 44.42, 35.07, 0.70)
    };
    let (next, notes) = decide_once(&setup, &written, FailureClass::GpuOom, facts);
    let m = moved(next);
    assert_eq!(
        m.plan.resources.gpus,
        written.resources.gpus,
        "{} {notes:?}",
        m.describe()
    );
    assert!(!m.changes_semantics, "{}", m.describe());
    assert_eq!(
        value(&m.plan, "actor_rollout_ref.actor.fsdp_config.param_offload"),
        "true",
        "{}",
        m.describe()
    );
    assert!(
        notes.iter().any(|n| n.contains("would ask for more GPUs")),
        "{notes:?}"
    );
    assert!(
        !notes
            .iter()
            .any(|n| n.starts_with("passed over fsdp-offload")),
        "the move takes it: {notes:?}"
    );
}

/// With verl's dynamic batching on a release before 0.6 the estimate's reserved counter holds
/// cached segments the allocator frees before it fails, so it can sit above the device peak;
/// what a training failure is measured against is the device peak.
#[test]
fn a_training_failure_is_measured_against_the_device_peak_not_the_reserved_counter() {
    let (mut setup, written) = load(
        "diamonds-seed0",
        "h100-80g",
        &[
            ("actor_rollout_ref.actor.use_dynamic_bsz", "True"),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "16384"),
        ],
    );
    setup.experiment.file.trainer_version = Some("0.5.0".parse().unwrap());
    let estimator = Estimator::new(&setup, &written).unwrap();
    let e = estimator.estimate(&setup, &written);
    assert!(
        e.estimate.train_reserved_gib > e.estimate.train_peak_gib,
        "{} {}",
        e.estimate.train_reserved_gib,
        e.estimate.train_peak_gib
    );
    let q = super::evidence::FailingPhase::Train.quantity(FailureClass::GpuOom, &e);
    assert_eq!(q, e.estimate.train_peak_gib);
}

/// After a failure that rules fragmentation out, a plan whose only step taken beyond the
/// failed one is an allocator setting is no answer, even when it undoes another step; one
/// that also takes a step that lowers the demand is the estimate's to judge.
#[test]
fn an_allocator_setting_alone_is_no_answer_even_beside_an_undone_step() {
    let (setup, written) = load("pretrain-512m", "h100-80g", &[]);
    let estimator = Estimator::new(&setup, &written).unwrap();
    // torchrun-yaml: expandable-segments, gradient-checkpointing, halve-micro-batch, …
    let current = candidate(&setup, &written, &[0, 0, 2]);
    let counts = |c: &[u32]| {
        let mut all = vec![0; setup.ladder.steps.len()];
        all[..c.len()].copy_from_slice(c);
        super::Candidate {
            plan: candidate(&setup, &written, c),
            counts: all,
        }
    };
    let alone_with = |reserved_unallocated: f64| {
        let failures = [failed(
            &current,
            FailureClass::GpuOom,
            torch_oom(2.21, 0.5, 79.18, 78.0, reserved_unallocated),
        )];
        let tried = HashSet::new();
        let prior = super::Prior::none();
        let cx = Context {
            setup: &setup,
            estimator: Some(&estimator),
            written: &written,
            current: &current,
            failures: &failures,
            tried: &tried,
            prior: &prior,
        };
        let alone = super::allocator_alone(&cx);
        [[1, 0, 2], [1, 0, 1], [1, 0, 3], [0, 0, 3]].map(|c| alone(&counts(&c)))
    };
    // 11 MiB reserved-but-unallocated: the first takes the allocator setting alone, the second
    // beside one halving undone.
    assert_eq!(alone_with(0.011), [true, true, false, false]);
    // 2 GiB next to a 2.21 GiB request: fragmentation may be the cause, every plan is judged.
    assert_eq!(alone_with(2.0), [false; 4]);
}

/// A mixture of experts never shares evidence with a dense shape: Qwen3-30B-A3B's top-k width
/// (8 × 768) is its config's `intermediate_size`, the figure orch once read it as a dense
/// model with, so its key names the routing.
#[test]
fn a_mixture_of_experts_keys_its_evidence_apart_from_a_dense_shape() {
    use crate::evidence_store::EvidenceKey;
    let (setup, plan) = load(
        "diamonds-seed0",
        "h100-80g",
        &[("model", "Qwen/Qwen3-30B-A3B-Base")],
    );
    let estimator = Estimator::new(&setup, &plan).unwrap();
    let key = EvidenceKey::of(&setup, &estimator, true);
    assert!(
        key.model.contains("ffn6144") && key.model.contains(" moe128x768k8"),
        "{key:?}"
    );
    let (dense_setup, dense_plan) = load("diamonds-seed0", "h100-80g", &[]);
    let dense = Estimator::new(&dense_setup, &dense_plan).unwrap();
    assert!(
        !EvidenceKey::of(&dense_setup, &dense, true)
            .model
            .contains("moe")
    );
}
