//! The real trainers accept what orch renders.
//!
//! Every built-in template is rendered with its experiment on every hardware profile at every
//! ladder depth (`orch render --step N`), plus what `orch submit` itself runs after preflight on
//! each profile (the local backend, `--no-simulate`). Each launch script is run by bash with a
//! stand-in `python3` / `python` / `torchrun` first on PATH that records the argument vector
//! bash hands it (after bash expanded and unquoted it) and its working directory. Those vectors
//! go to `tools/trainer-configs/check.py`, which runs the trainers' own config code — verl
//! 0.9.1's Hydra config and `validate_config`, AReaL 1.0.4's CLI loader and launcher checks,
//! Hydra + genrl 0.1.11's `GRPOTrainerConfig` for RL Swarm, the example torchrun script's own
//! reader — installed by `scripts/trainer-configs-up.sh` without their GPU dependencies. Every
//! rendered script also passes `bash -n` and shellcheck.
//!
//! A variant orch itself refuses before submitting (a rule, a step that does not apply) is
//! counted apart; every other one must be accepted. A failure names the template, profile,
//! depth, and the trainer's own error. The table is printed (`--nocapture`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Orch, path_without_nvidia_smi, repo_root, which, write_exe};

/// A template, the experiment that shows it, its launch script and the checker that reads it.
struct Trainer {
    template: &'static str,
    experiment: &'static str,
    script: &'static str,
    checker: &'static str,
    venv: &'static str,
}

const TRAINERS: &[Trainer] = &[
    Trainer {
        template: "verl-grpo",
        experiment: "diamonds-seed0",
        script: "run_grpo.sh",
        checker: "verl",
        venv: "verl",
    },
    Trainer {
        template: "areal-grpo",
        experiment: "gsm8k-areal",
        script: "run_areal.sh",
        checker: "areal",
        venv: "areal",
    },
    Trainer {
        template: "rl-swarm",
        experiment: "rl-swarm-qwen",
        script: "run_swarm.sh",
        checker: "rl-swarm",
        venv: "verl",
    },
    Trainer {
        template: "torchrun-yaml",
        experiment: "pretrain-512m",
        script: "run_train.sh",
        checker: "torchrun",
        venv: "verl",
    },
];

/// The Python of one of the environments `scripts/trainer-configs-up.sh` made.
fn venv_python(name: &str) -> PathBuf {
    let root = std::env::var_os("ORCH_TRAINER_VENVS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/trainer-configs"));
    let python = root.join(name).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/trainer-configs-up.sh (scripts/test.sh does) to install the trainers' config code",
        python.display()
    );
    python
}

fn profiles() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("profiles"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// A directory with `python3`, `python` and `torchrun` that record their arguments and
/// working directory (NUL-separated, the directory first) in `$ORCH_ARGV_OUT`.
fn stand_in_interpreters(dir: &Path) -> PathBuf {
    let bin = dir.join("stand-in-bin");
    for name in ["python3", "python", "torchrun"] {
        write_exe(
            &bin.join(name),
            "#!/usr/bin/env bash\n# A stand-in interpreter (orch's test suite): records what it was given.\n{ printf '%s\\0' \"$PWD\"; printf '%s\\0' \"$@\"; } > \"$ORCH_ARGV_OUT\"\n",
        );
    }
    bin
}

/// One argument vector to check, and values the trainer must read from it exactly.
struct Case {
    label: String,
    cwd: String,
    argv: Vec<String>,
    expect: serde_json::Value,
}

fn read_record(path: &Path) -> (String, Vec<String>) {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("the stand-in interpreter left no record ({e})"));
    let mut parts: Vec<String> = bytes
        .split(|b| *b == 0)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    parts.pop(); // after the last NUL
    let cwd = parts.remove(0);
    (cwd, parts)
}

/// The launch script's argument vector, from running it under the stand-ins.
fn record(script: &Path, env: &Env) -> (String, Vec<String>) {
    let out = script.with_extension("argv");
    let status = Command::new("bash")
        .arg(script)
        .current_dir(script.parent().unwrap())
        .env("HOME", &env.home)
        .env("PATH", &env.path)
        .env("ORCH_ARGV_OUT", &out)
        .status()
        .unwrap();
    assert!(status.success(), "{} exited {status}", script.display());
    read_record(&out)
}

/// Where the scripts run: a home with the checkouts the templates `cd` into, and the stand-ins.
struct Env {
    home: PathBuf,
    path: String,
}

/// `bash -n` on each rendered script and one shellcheck over all of them (a warning needs a
/// `# shellcheck disable=…` with its reason in the template); the problems, each naming its
/// file (`out/<template>/<profile>/<depth>/…`).
fn lint(scripts: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for script in scripts {
        let syntax = Command::new("bash").arg("-n").arg(script).output().unwrap();
        if !syntax.status.success() {
            problems.push(format!(
                "{}: bash -n: {}",
                script.display(),
                String::from_utf8_lossy(&syntax.stderr)
            ));
        }
    }
    for chunk in scripts.chunks(200) {
        let check = Command::new(which("shellcheck"))
            .arg("--format=gcc")
            .args(chunk)
            .output()
            .unwrap();
        if !check.status.success() {
            let out = String::from_utf8_lossy(&check.stdout);
            problems.extend(out.lines().map(|l| format!("shellcheck: {l}")));
            if out.trim().is_empty() {
                problems.push(format!(
                    "shellcheck exited {}: {}",
                    check.status,
                    String::from_utf8_lossy(&check.stderr)
                ));
            }
        }
    }
    problems
}

/// What one trainer's variants came to.
#[derive(Default)]
struct Tally {
    rendered: usize,
    refused_by_orch: usize,
    accepted: usize,
    failures: Vec<String>,
    stand_ins: String,
}

fn render_variants(orch: &Orch, trainer: &Trainer, env: &Env, tally: &mut Tally) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut scripts = Vec::new();
    for profile in profiles() {
        for depth in 0.. {
            let out = format!("out/{}/{profile}/{depth}", trainer.template);
            let depth_arg = depth.to_string();
            let run = orch.run(&[
                "render",
                trainer.experiment,
                "--profile",
                &profile,
                "--step",
                &depth_arg,
                "--out",
                &out,
            ]);
            if run.code == 2 && run.stderr.contains("steps") && run.stderr.contains("--step") {
                break; // past the ladder's end
            }
            tally.rendered += 1;
            let label = format!("{} on {profile}, {depth} steps", trainer.template);
            if run.code != 0 {
                tally.refused_by_orch += 1;
                assert_eq!(run.code, 2, "{label}: {run:?}");
                continue;
            }
            let dir = orch.path().join(&out);
            scripts.push(dir.join("job.sbatch"));
            scripts.push(dir.join(trainer.script));
            let (cwd, argv) = record(&dir.join(trainer.script), env);
            cases.push(Case {
                label,
                cwd,
                argv,
                expect: serde_json::json!({}),
            });
        }
        // What `orch submit` runs on this profile: preflight's plan, through the local backend.
        let argv_file = orch
            .path()
            .join(format!("submitted-{}-{profile}.argv", trainer.template));
        let runs = format!("runs-{}-{profile}", trainer.template);
        let mut cmd = orch.command(&[
            "submit",
            trainer.experiment,
            "--profile",
            &profile,
            "--backend",
            "local",
            "--no-simulate",
            "--preflight=on",
            "--max-attempts",
            "1",
            "--runs-dir",
            &runs,
        ]);
        let output = cmd
            .env("HOME", &env.home)
            .env("PATH", &env.path)
            .env("ORCH_ARGV_OUT", &argv_file)
            .output()
            .unwrap();
        let label = format!("{} on {profile}, as submitted", trainer.template);
        tally.rendered += 1;
        match output.status.code() {
            Some(0) => {
                let (cwd, argv) = read_record(&argv_file);
                cases.push(Case {
                    label,
                    cwd,
                    argv,
                    expect: serde_json::json!({}),
                });
            }
            Some(2) => tally.refused_by_orch += 1,
            other => tally.failures.push(format!(
                "{label}: orch submit exited {other:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            )),
        }
    }
    tally.failures.extend(lint(&scripts));
    cases
}

/// The checker's verdict on each case: (label, refusal: stage and the trainer's error).
fn verdicts(
    orch: &Orch,
    trainer: &Trainer,
    cases: &[Case],
) -> (Vec<(String, Option<String>)>, String) {
    let schema = repo_root()
        .join("templates")
        .join(trainer.template)
        .join("keys.yaml");
    let json: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({
                "label": c.label, "cwd": c.cwd, "argv": c.argv, "schema": schema,
                "expect": c.expect,
            })
        })
        .collect();
    let file = orch.path().join(format!("cases-{}.json", trainer.template));
    std::fs::write(&file, serde_json::to_vec(&json).unwrap()).unwrap();
    let output = Command::new(venv_python(trainer.venv))
        .arg(repo_root().join("tools/trainer-configs/check.py"))
        .arg(trainer.checker)
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "check.py {} failed:\n{stdout}\n{}",
        trainer.checker,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut out = Vec::new();
    let mut stand_ins = String::new();
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(names) = v.get("stand_ins") {
            stand_ins = names.to_string();
            continue;
        }
        let refusal = (v["ok"] != true).then(|| {
            format!(
                "refused by the trainer at {}: {}",
                v["stage"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or("?")
            )
        });
        out.push((v["label"].as_str().unwrap().to_string(), refusal));
    }
    assert_eq!(
        out.len(),
        cases.len(),
        "check.py answered {} of {} cases",
        out.len(),
        cases.len()
    );
    (out, stand_ins)
}

fn check_with_the_trainer(orch: &Orch, trainer: &Trainer, cases: &[Case], tally: &mut Tally) {
    let (answers, stand_ins) = verdicts(orch, trainer, cases);
    tally.stand_ins = stand_ins;
    for (label, refusal) in answers {
        match refusal {
            None => tally.accepted += 1,
            Some(why) => tally.failures.push(format!("{label}: {why}")),
        }
    }
}

/// An orch project with the stand-in interpreters and a home holding the checkouts the AReaL
/// and RL Swarm launch scripts `cd` into (their configs are written there by check.py).
fn setup() -> (Orch, Env) {
    let orch = Orch::new();
    let home = orch.path().join("home");
    for checkout in ["AReaL", "rl-swarm"] {
        std::fs::create_dir_all(home.join(checkout)).unwrap();
    }
    let bin = stand_in_interpreters(orch.path());
    let env = Env {
        home,
        path: format!("{}:{}", bin.display(), path_without_nvidia_smi()),
    };
    (orch, env)
}

#[test]
fn every_rendered_variant_is_accepted_by_the_real_trainer() {
    let (orch, env) = setup();
    // One thread per trainer: most of the time goes to waiting on orch and the checkers.
    let table: BTreeMap<&str, Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = TRAINERS
            .iter()
            .map(|trainer| {
                let (orch, env) = (&orch, &env);
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    let cases = render_variants(orch, trainer, env, &mut tally);
                    check_with_the_trainer(orch, trainer, &cases, &mut tally);
                    (trainer.template, tally)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("template        rendered  refused-by-orch  accepted  failed  stand-ins");
    let mut failures = Vec::new();
    for (template, t) in &table {
        println!(
            "{template:<15} {:>8}  {:>15}  {:>8}  {:>6}  {}",
            t.rendered,
            t.refused_by_orch,
            t.accepted,
            t.failures.len(),
            t.stand_ins
        );
        failures.extend(t.failures.iter().cloned());
    }
    assert!(
        failures.is_empty(),
        "{} variants refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
    for (template, t) in &table {
        // Something on every profile must reach the trainer: a test that checked nothing fails.
        assert!(
            t.accepted >= profiles().len(),
            "{template}: only {} variants reached the trainer",
            t.accepted
        );
    }
}

/// Render `trainer`'s experiment with `sets`, run its launch script under the stand-ins, and
/// return the case (with the values the trainer must read).
fn rendered_case(
    orch: &Orch,
    env: &Env,
    trainer: &Trainer,
    sets: &[&str],
    expect: serde_json::Value,
) -> Case {
    let out = format!("values/{}", trainer.template);
    let mut args = vec!["render", trainer.experiment, "--out", &out];
    for set in sets {
        args.extend(["--set", set]);
    }
    orch.expect(&args, 0);
    let (cwd, argv) = record(&orch.path().join(&out).join(trainer.script), env);
    Case {
        label: format!("{} with {sets:?}", trainer.template),
        cwd,
        argv,
        expect,
    }
}

#[test]
fn values_reach_the_trainer_exactly_as_given() {
    let (orch, env) = setup();
    let home = env.home.display().to_string();
    // Everything Hydra's grammar reserves, an interpolation, and what a shell would run.
    let hostile = r#"it's "x" ${oc.env:HOME} a,b [c] {d} = \ ~e $(touch p)"#;
    let verl = &TRAINERS[0];
    let case = rendered_case(
        &orch,
        &env,
        verl,
        &[
            &format!("trainer.experiment_name={hostile}"),
            "trainer.logger=[console,wandb]",
            // LoRA, which the estimator reads: a rank and a list of PEFT target modules.
            "actor_rollout_ref.model.lora_rank=32",
            "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
            // SGLang as the rollout, which the estimator sizes as SGLang does.
            "actor_rollout_ref.rollout.name=sglang",
            "train_files=~/my data/train.parquet",
            "val_files=/data/with space/test.parquet",
        ],
        serde_json::json!({
            "trainer.experiment_name": hostile,
            "trainer.logger": ["console", "wandb"],
            "actor_rollout_ref.model.lora_rank": 32,
            "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
            "actor_rollout_ref.rollout.name": "sglang",
            "data.train_files": format!("{home}/my data/train.parquet"),
            "data.val_files": "/data/with space/test.parquet",
        }),
    );
    let areal = &TRAINERS[1];
    let areal_case = rendered_case(
        &orch,
        &env,
        areal,
        &["train_files=~/data/gsm8k"],
        serde_json::json!({ "train_dataset.path": format!("{home}/data/gsm8k") }),
    );
    let swarm = &TRAINERS[2];
    let swarm_case = rendered_case(
        &orch,
        &env,
        swarm,
        &["model=~/models/Qwen 0.5B"],
        serde_json::json!({
            "game_manager.trainer.models.0.pretrained_model_name_or_path": format!("{home}/models/Qwen 0.5B"),
        }),
    );
    for (trainer, case) in [(verl, case), (areal, areal_case), (swarm, swarm_case)] {
        let (answers, _) = verdicts(&orch, trainer, std::slice::from_ref(&case));
        assert_eq!(answers[0].1, None, "{}:\n{:?}", case.label, case.argv);
    }
    // What AReaL's launcher would pass through a second shell is refused, naming the key, and
    // nothing is written.
    let run = orch.expect(
        &[
            "render",
            "gsm8k-areal",
            "--set",
            "experiment_name=a b",
            "--out",
            "refused",
        ],
        2,
    );
    assert!(
        run.stderr.contains("experiment_name") && run.stderr.contains("through a shell"),
        "{run:?}"
    );
    assert!(!orch.path().join("refused/run_areal.sh").exists());
}

/// `argv` with `key=value` in place of the argument for `key` (added when absent).
fn with_override(argv: &[String], key: &str, value: &str) -> Vec<String> {
    let arg = format!("{key}={value}");
    let mut out: Vec<String> = argv.to_vec();
    match out.iter().position(|a| a.split('=').next() == Some(key)) {
        Some(i) => out[i] = arg,
        None => out.push(arg),
    }
    out
}

#[test]
fn orch_refuses_before_submission_what_verl_refuses() {
    let (orch, env) = setup();
    let verl = &TRAINERS[0];
    let base = rendered_case(&orch, &env, verl, &[], serde_json::json!({}));
    // diamonds-seed0 on its h100-80g profile: 4 GPUs, train 1024, mini 256, micro 32, n 5.
    // Each value alone, given to orch's rules (`orch render --set`) and to verl's own
    // validate_config. `None`: verl's config code decides, and orch must agree with it. A
    // reason: verl refuses it only at run time — after the queue wait — so orch must refuse it
    // before submission.
    const AT_RUN_TIME_MICRO: &str = "verl 0.9.1 asserts it in prepare_micro_batches (verl/workers/engine/utils.py): the per-GPU mini-batch must be divisible by the micro batch";
    const AT_RUN_TIME_BUDGET: &str = "verl asserts it after the first rollout (rearrange_micro_batches, verl/utils/seqlen_balancing.py): the token budget must hold one padded prompt + response";
    const DYNAMIC: (&str, &str) = ("actor_rollout_ref.actor.use_dynamic_bsz", "true");
    const BUDGET: &str = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu";
    const ROLLOUT_MICRO: &str = "actor_rollout_ref.rollout.log_prob_micro_batch_size";
    const REF_MICRO: &str = "actor_rollout_ref.ref.log_prob_micro_batch_size";
    // Each case: the values set together, and why verl refuses them only at run time.
    type RuleCase<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
    let cases: &[RuleCase] = &[
        (&[("data.train_batch_size", "1023")], None), // 1023 × 5 not divisible by 4 GPUs
        (&[("data.train_batch_size", "1028")], None),
        (
            &[("actor_rollout_ref.actor.ppo_mini_batch_size", "2048")],
            None,
        ), // above the train batch
        (
            &[("actor_rollout_ref.actor.ppo_mini_batch_size", "128")],
            None,
        ),
        (&[("actor_rollout_ref.rollout.n", "3")], None),
        (
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "40")],
            None,
        ),
        (
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "48")],
            Some(AT_RUN_TIME_MICRO),
        ), // 320 % 48
        (
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "0")],
            Some(AT_RUN_TIME_MICRO),
        ), // ÷ 0
        (
            &[("actor_rollout_ref.rollout.gpu_memory_utilization", "1.5")],
            Some("vLLM refuses it when the engine starts"),
        ),
        // The log-prob passes' micro batch: none, or both, is refused without dynamic batches.
        (
            &[(
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                "null",
            )],
            None,
        ),
        (&[(ROLLOUT_MICRO, "64")], None),
        (
            &[(
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                "null",
            )],
            None,
        ),
        (&[(REF_MICRO, "64")], None),
        (
            &[
                DYNAMIC,
                (
                    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                    "null",
                ),
            ],
            None,
        ),
        // LoRA with vLLM: ranks up to vLLM's largest, 512.
        (&[("actor_rollout_ref.model.lora_rank", "512")], None),
        (&[("actor_rollout_ref.model.lora_rank", "513")], None),
        (
            &[
                ("actor_rollout_ref.model.lora_rank", "32"),
                ("actor_rollout_ref.rollout.layered_summon", "true"),
            ],
            Some(
                "verl raises at the first rollout (collect_lora_params, verl/utils/fsdp_utils.py): layered_summon needs the base weights preloaded in vLLM, not the default dummy load_format",
            ),
        ),
        (
            &[
                ("actor_rollout_ref.model.lora_rank", "32"),
                ("actor_rollout_ref.rollout.layered_summon", "true"),
                ("actor_rollout_ref.rollout.load_format", "safetensors"),
            ],
            None,
        ),
        // Dynamic batches: the token budget against one 512 + 1024 sequence.
        (&[DYNAMIC, (BUDGET, "1536")], None),
        (&[DYNAMIC, (BUDGET, "1024")], Some(AT_RUN_TIME_BUDGET)),
    ];
    let mut checked = Vec::new();
    let mut orch_verdicts = Vec::new();
    for (i, (values, at_run_time)) in cases.iter().enumerate() {
        let out = format!("rules/{i}");
        let sets: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["render", verl.experiment, "--out", &out];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let run = orch.run(&args);
        let label = sets.join(" ");
        assert!(run.code == 0 || run.code == 2, "{label}: {run:?}");
        orch_verdicts.push((label.clone(), run.code == 0, *at_run_time, run.stderr));
        let argv = values
            .iter()
            .fold(base.argv.clone(), |argv, (k, v)| with_override(&argv, k, v));
        checked.push(Case {
            label,
            cwd: base.cwd.clone(),
            argv,
            expect: serde_json::json!({}),
        });
    }
    let (answers, _) = verdicts(&orch, verl, &checked);
    let mut disagreements = Vec::new();
    println!(
        "value                                                       orch      verl's config code"
    );
    for ((set, orch_ok, at_run_time, stderr), (_, refusal)) in orch_verdicts.iter().zip(&answers) {
        let verl_ok = refusal.is_none();
        let word = |ok: bool| if ok { "accepts" } else { "refuses" };
        let note = at_run_time
            .map(|r| format!(" (at run time: {r})"))
            .unwrap_or_default();
        println!("{set:<60} {:<9} {}{note}", word(*orch_ok), word(verl_ok));
        if at_run_time.is_none() && *orch_ok != verl_ok {
            disagreements.push(format!(
                "{set}: orch {} ({}), verl {} ({refusal:?})",
                word(*orch_ok),
                stderr.trim(),
                word(verl_ok)
            ));
        }
        if at_run_time.is_some() && *orch_ok {
            disagreements.push(format!("{set}: orch should refuse it before submission"));
        }
    }
    assert!(
        disagreements.is_empty(),
        "orch's rules and verl's validate_config disagree:\n{}",
        disagreements.join("\n")
    );
    // Both verdicts occur, so the comparison can fail either way.
    assert!(orch_verdicts.iter().any(|v| v.1) && orch_verdicts.iter().any(|v| !v.1));
}

/// The torchrun template's keys.yaml states the defaults orch assumes for a key the experiment
/// leaves out (the estimator reads them, a climb reads `max_steps`); the rendered training
/// config leaves such a key out, so `examples/torchrun/train.py` applies its own. Both must be
/// the same numbers: the script's own `read_settings` on an empty config is asked for them.
#[test]
fn torchrun_keys_defaults_are_what_train_py_does_without_them() {
    let keys: BTreeMap<String, serde_yaml::Value> = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("templates/torchrun-yaml/keys.yaml")).unwrap(),
    )
    .unwrap();
    let script = r#"
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
import stubs
stubs.install(["torch", "transformers"])
spec = importlib.util.spec_from_file_location("train", sys.argv[2])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
print(json.dumps(train.read_settings(lambda key, default=None: default)))
"#;
    let output = Command::new(venv_python("verl"))
        .arg("-c")
        .arg(script)
        .arg(repo_root().join("tools/trainer-configs"))
        .arg(repo_root().join("examples/torchrun/train.py"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "train.py's read_settings failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let settings: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&output.stdout).unwrap();
    // read_settings' names for the keys it renames.
    let renamed = [
        ("micro", "micro_batch_size"),
        ("accum", "gradient_accumulation_steps"),
        ("seq", "max_seq_len"),
    ];
    let mut compared = 0;
    let mut differ = Vec::new();
    for (name, value) in &settings {
        let key = renamed
            .iter()
            .find(|(n, _)| n == name)
            .map_or(name.as_str(), |(_, k)| k);
        let Some(ours) = keys.get(key) else { continue };
        compared += 1;
        let ours = serde_json::to_value(ours).unwrap();
        if ours.as_f64() != value.as_f64() || (ours.as_f64().is_none() && &ours != value) {
            differ.push(format!("{key}: keys.yaml {ours}, train.py {value}"));
        }
    }
    assert!(
        compared >= 10,
        "only {compared} keys compared: {settings:?}"
    );
    assert!(
        differ.is_empty(),
        "templates/torchrun-yaml/keys.yaml disagrees with train.py's defaults:\n{}",
        differ.join("\n")
    );
}
