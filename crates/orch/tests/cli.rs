//! Bad input gets a clear error, names where the problem is, and submits nothing. The whole
//! error (exit code and output, the project directory redacted) is a snapshot.

use crate::support::{Orch, Run, write_exe};

fn no_runs(orch: &Orch) {
    let runs = orch.path().join(".orch/runs");
    let count = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(count, 0, "a run was created in {}", runs.display());
}

/// `orch submit --backend local EXPERIMENT ARGS…`, refused as bad input (exit 2) before
/// anything is submitted.
fn refused(orch: &Orch, experiment: &str, args: &[&str]) -> Run {
    let run = orch.submit_local(experiment, args, 2);
    no_runs(orch);
    run
}

#[test]
fn unknown_experiment_lists_the_known_ones() {
    let orch = Orch::new();
    let run = refused(&orch, "diamonds-seed9", &[]);
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn unknown_profile_lists_the_profiles_and_suggests() {
    let orch = Orch::new();
    let run = refused(&orch, "diamonds-seed0", &["--profile", "h100"]);
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn malformed_yaml_names_file_line_and_key() {
    let orch = Orch::new().file(
        "profiles/mycard.yaml",
        "description: my card\ngpu:\n  model: X\n  memory_gib: lots\n  per_node: 8\n",
    );
    let run = refused(&orch, "diamonds-seed0", &["--profile", "mycard"]);
    assert!(run.stderr.contains("profiles/mycard.yaml:4:"), "{run:?}");
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn unknown_yaml_key_is_an_error_with_its_line() {
    let orch = Orch::new().file(
        "experiments/mine.yaml",
        "template: verl-grpo\nprofile: a40\nmodle: Qwen/Qwen2.5-7B-Instruct\n",
    );
    let run = orch.expect(&["render", "mine"], 2);
    assert!(run.stderr.contains("experiments/mine.yaml:3:"), "{run:?}");
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn a_template_with_the_old_simulator_key_is_refused_with_its_new_name() {
    // `simulator:` became `trainer:` (issue 25): an upgraded project's own template is refused
    // at load, naming the file, the line and the key to write instead.
    let old = include_str!("../../../templates/verl-grpo/template.yaml")
        .replace("\ntrainer: verl\n", "\nsimulator: verl\n");
    let orch = Orch::new().file("templates/verl-grpo/template.yaml", &old);
    let run = orch.expect(&["render", "diamonds-seed0"], 2);
    assert!(
        run.stderr
            .contains("templates/verl-grpo/template.yaml:4:1: ")
            && run
                .stderr
                .contains("`simulator:` was renamed `trainer:` (it names the trainer"),
        "{run:?}"
    );
}

#[test]
fn unknown_trainer_key_is_refused_with_a_suggestion() {
    let orch = Orch::new();
    let run = refused(
        &orch,
        "diamonds-seed0",
        &[
            "--set",
            "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5",
        ],
    );
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn out_of_range_and_divisibility_rules_name_the_key_rule_and_source() {
    let orch = Orch::new();
    for (name, sets) in [
        (
            "gpu_memory_utilization_out_of_range",
            &["actor_rollout_ref.rollout.gpu_memory_utilization=1.5"][..],
        ),
        (
            "mini_batch_not_divisible_by_micro",
            &["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=24"],
        ),
        (
            "train_batch_not_divisible_by_gpus",
            &["data.train_batch_size=1023", "resources.gpus=2"],
        ),
        ("zero_batch", &["data.train_batch_size=0"]),
    ] {
        let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
        let run = refused(&orch, "diamonds-seed0", &args);
        insta::assert_snapshot!(name, orch.redacted(&run));
    }
}

#[test]
fn orch_owned_keys_point_at_resources() {
    let orch = Orch::new();
    let run = refused(
        &orch,
        "diamonds-seed0",
        &["--set", "trainer.n_gpus_per_node=8"],
    );
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn a_ladder_that_changes_semantics_before_keeping_them_is_refused() {
    let orch = Orch::new().file(
        "ladders/verl-grpo.yaml",
        "steps:\n  - name: halve-batches\n    answers: [gpu_oom]\n    changes_semantics: true\n    overrides:\n      data.train_batch_size: {divide: 2}\n  - name: offload\n    answers: [gpu_oom]\n    overrides:\n      actor_rollout_ref.actor.fsdp_config.param_offload: true\n",
    );
    let run = refused(&orch, "diamonds-seed0", &[]);
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn template_errors_name_the_template_and_line_and_submit_nothing() {
    let orch = Orch::new().file(
        "templates/verl-grpo/run_grpo.sh.j2",
        "#!/bin/bash\n# line 2\necho {{ experiment.nmae | shq }}\n",
    );
    let run = refused(&orch, "diamonds-seed0", &[]);
    assert!(run.stderr.contains("run_grpo.sh.j2 line 3"), "{run:?}");
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn a_hostile_set_value_arrives_literally_and_runs_nothing() {
    let orch = Orch::new();
    let marker = orch.path().join("pwned");
    let hostile = format!(
        "x$(touch {})`touch {}`;touch {}",
        marker.display(),
        marker.display(),
        marker.display()
    );
    let set = format!("trainer.experiment_name={hostile}");
    let run = orch.expect(
        &["render", "diamonds-seed0", "--set", &set, "--out", "out"],
        0,
    );
    insta::assert_snapshot!(orch.redacted(&run));
    // Run the rendered script with a fake python3 that records its arguments.
    let bin = orch.path().join("bin");
    let args_file = orch.path().join("args");
    write_exe(
        &bin.join("python3"),
        &format!(
            "#!/bin/bash\nprintf '%s\\n' \"$@\" > {}\n",
            args_file.display()
        ),
    );
    let status = std::process::Command::new("bash")
        .arg(orch.path().join("out/run_grpo.sh"))
        // If quoting ever broke, whatever the script ran would land in the test's directory.
        .current_dir(orch.path())
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .status()
        .unwrap();
    assert!(status.success());
    let args = std::fs::read_to_string(&args_file).unwrap();
    // In Hydra quotes, so that verl's Hydra reads it back as that very string (the real
    // parser's reading is checked in tests/trainer_configs.rs).
    let quoted = format!("trainer.experiment_name=\"{hostile}\"");
    assert!(
        args.lines().any(|l| l == quoted),
        "argument not literal:\n{args}"
    );
    assert!(!marker.exists(), "the hostile value was executed");
}

#[test]
fn hostile_values_cannot_break_out_of_sbatch_directives() {
    let orch = Orch::new();
    let run = orch.expect(
        &[
            "render",
            "diamonds-seed0",
            "--set",
            "resources.partition=gpu\n#SBATCH --uid=0",
        ],
        2,
    );
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn sweep_names_expand_and_render_needs_one_member() {
    let orch = Orch::new();
    let run = orch.expect(&["render", "diamonds"], 2);
    insta::assert_snapshot!("render_a_sweep", orch.redacted(&run));
    let run = orch.expect(&["render", "diamonds-seed3", "--out", "s3"], 0);
    insta::assert_snapshot!("render_a_member", orch.redacted(&run));
    let script = std::fs::read_to_string(orch.path().join("s3/run_grpo.sh")).unwrap();
    assert!(script.contains("    data.seed=3 \\\n"), "{script}");
    // plan.yaml beside the scripts says where each value came from.
    let plan = std::fs::read_to_string(orch.path().join("s3/plan.yaml")).unwrap();
    assert!(plan.contains("experiments/diamonds.yaml"), "{plan}");
}

#[test]
fn render_step_applies_the_first_n_steps() {
    let orch = Orch::new();
    orch.expect(
        &["render", "diamonds-seed0", "--step", "2", "--out", "s2"],
        0,
    );
    let script = std::fs::read_to_string(orch.path().join("s2/run_grpo.sh")).unwrap();
    // Two halvings (verl's ladder starts with them: it has no allocator step).
    assert!(
        script.contains("    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \\\n"),
        "{script}"
    );
    assert!(!script.contains("expandable_segments"), "{script}");
    let run = orch.expect(&["render", "diamonds-seed0", "--step", "99"], 2);
    insta::assert_snapshot!(orch.redacted(&run));
    // A step that changes nothing still counts, and says so: diamonds batches by count, so
    // the ladder's fourth step (`halve-token-budget`, `when:` dynamic batches) does not apply.
    let run = orch.expect(
        &["render", "diamonds-seed0", "--step", "4", "--out", "s4"],
        0,
    );
    assert!(
        run.stderr.contains(
            "note: step 4 (halve-token-budget) applies only where `actor_rollout_ref.actor.use_dynamic_bsz` holds, not here; the files are those after step 3"
        ),
        "{}",
        run.stderr
    );
    orch.expect(
        &["render", "diamonds-seed0", "--step", "3", "--out", "s3"],
        0,
    );
    let read =
        |dir: &str| std::fs::read_to_string(orch.path().join(dir).join("plan.yaml")).unwrap();
    assert_eq!(read("s3"), read("s4"));
}

#[test]
fn profiles_and_ladder_list_what_users_can_edit() {
    let orch = Orch::new().file(
        "profiles/mycard.yaml",
        "description: my card\ngpu: {model: My GPU, memory_gib: 30, per_node: 2}\nhost: {memory_gib: 64}\nslurm: {partition: p, gres_type: mine, gpus: 2, nodes: 1, cpus_per_task: 8, mem_gb: 60, time: '01:00:00'}\n",
    );
    let run = orch.expect(&["profiles"], 0);
    insta::assert_snapshot!("profiles", orch.redacted(&run));
    let run = orch.expect(&["ladder", "diamonds-seed0", "--profile", "a40"], 0);
    insta::assert_snapshot!("ladder", orch.redacted(&run));
}

#[test]
fn experiments_lists_sweeps_with_their_members_and_the_project_s_own() {
    let orch = Orch::new().file(
        "experiments/mine.yaml",
        "template: verl-grpo\nprofile: a40\n",
    );
    let run = orch.expect(&["experiments"], 0);
    insta::assert_snapshot!(orch.redacted(&run));
}

#[test]
fn status_and_history_of_an_empty_project() {
    let orch = Orch::new();
    let run = orch.expect(&["status"], 0);
    insta::assert_snapshot!("status_without_runs", orch.redacted(&run));
    let run = orch.expect(&["status", "--json"], 0);
    assert_eq!(run.json(), serde_json::json!([]));
    let run = orch.run(&["history", "no-such-run"]);
    insta::assert_snapshot!("history_of_an_unknown_run", orch.redacted(&run));
}

#[test]
fn a_closed_stdout_ends_data_commands_quietly() {
    // `orch ladder EXP | head -1`: once the reader is gone, orch stops with exit 0 and no panic.
    let orch = Orch::new();
    for args in [
        &["ladder", "diamonds-seed0"][..],
        &["profiles"],
        &["experiments"],
        &["estimate", "diamonds-seed0"],
        &["render", "diamonds-seed0", "--out", "r"],
    ] {
        let mut child = orch
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before orch writes a byte
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Trainer values of the wrong type are refused with the key, the value, where it came from
/// and the default that sets the type; so is the checkpoint key, which orch owns.
#[test]
fn trainer_values_are_type_checked_and_the_checkpoint_key_is_orchs() {
    let orch = Orch::new();
    for (set, says) in [
        ("trainer.total_epochs=lots", "must be a whole number"),
        (
            "actor_rollout_ref.model.enable_gradient_checkpointing=yes please",
            "must be true or false",
        ),
        ("data.max_prompt_length=512.5", "must be a whole number"),
        ("data.train_batch_size=1e30", "must be a whole number"),
        ("actor_rollout_ref.rollout.top_p=lots", "must be a number"),
        ("trainer.default_local_dir=/elsewhere", "orch sets this key"),
    ] {
        let run = refused(&orch, "diamonds-seed0", &["--set", set]);
        let key = set.split('=').next().unwrap();
        assert!(
            run.stderr.contains(key) && run.stderr.contains(says) && run.stderr.contains("--set"),
            "{set}: {run:?}"
        );
    }
    // A coefficient whose default happens to be written as an integer takes any number.
    orch.expect(
        &[
            "render",
            "diamonds-seed0",
            "--set",
            "actor_rollout_ref.actor.entropy_coeff=0.001",
        ],
        0,
    );
}

/// Watch settings out of range are refused by name, with the range.
#[test]
fn watch_settings_out_of_range_are_refused() {
    let orch = Orch::new();
    for (args, says) in [
        (&["--poll-interval", "inf"][..], "0.05 to 3600"),
        (&["--poll-interval", "1e300"][..], "0.05 to 3600"),
        (&["--poll-interval", "0"][..], "0.05 to 3600"),
        (&["--hang-timeout", "0"][..], "at least 1s"),
        (&["--max-attempts", "0"][..], "1..=100"),
    ] {
        let run = refused(&orch, "diamonds-seed0", args);
        assert!(run.stderr.contains(says), "{args:?}: {run:?}");
    }
}

/// Setting the key a sweep varies, when submitting the whole sweep, would run every member
/// with one value: refused, naming the conflict and what to do instead.
#[test]
fn setting_the_swept_key_of_a_whole_sweep_is_refused() {
    let orch = Orch::new();
    for set in ["seed=7", "data.seed=7"] {
        let run = refused(&orch, "diamonds", &["--set", set]);
        assert!(
            run.stderr.contains("sweep `diamonds` varies `seed`")
                && run.stderr.contains("orch submit diamonds-seed0"),
            "{run:?}"
        );
    }
}

/// A ladder is checked against its template when it loads: an unknown key, `repeat: 0`, and
/// arithmetic on a flag or a string are refused before anything is submitted.
#[test]
fn a_ladder_is_checked_against_its_template_when_it_loads() {
    for (step, says) in [
        (
            "overrides:\n      data.train_batch_sise: {divide: 2}",
            "not a key template `verl-grpo` accepts (did you mean `data.train_batch_size`?)",
        ),
        (
            "repeat: 0\n    overrides:\n      data.train_batch_size: {divide: 2}",
            "`repeat: 0`",
        ),
        (
            "overrides:\n      actor_rollout_ref.rollout.name: {multiply: 2}",
            "`multiply` needs a number",
        ),
        (
            "overrides:\n      actor_rollout_ref.model.enable_gradient_checkpointing: {add: 1}",
            "`add` needs a number",
        ),
        (
            "overrides:\n      trainer.default_local_dir: /tmp/elsewhere",
            "orch sets this key",
        ),
    ] {
        let orch = Orch::new().file(
            "ladders/verl-grpo.yaml",
            &format!("steps:\n  - name: bad\n    answers: [gpu_oom]\n    {step}\n"),
        );
        let run = refused(&orch, "diamonds-seed0", &[]);
        assert!(
            run.stderr.contains("ladders/verl-grpo.yaml") && run.stderr.contains(says),
            "{step}: {run:?}"
        );
    }
}

/// `--set` values that cannot mean anything are refused: an impossible time limit, an empty
/// model, a var no template reads, an attempt budget out of range.
#[test]
fn meaningless_set_values_are_refused() {
    let orch = Orch::new();
    for (set, says) in [
        ("resources.time=99:99:99", "minutes and seconds below 60"),
        ("model=", "--set model=: an empty value"),
        ("vars.x=1", "has no var `x`"),
        ("max_attempts=0", "give a whole number from 1 to 100"),
    ] {
        let run = refused(&orch, "diamonds-seed0", &["--set", set]);
        assert!(run.stderr.contains(says), "{set}: {run:?}");
    }
}

/// Files that are not YAML orch can read get one clear message naming the file: a
/// duplicate key inside `overrides:`, a byte-order mark, a binary file, a name outside the
/// safe alphabet.
#[test]
fn unreadable_experiment_files_are_named_with_the_reason() {
    let body = "template: verl-grpo\nprofile: a40\noverrides:\n  data.train_batch_size: 8\n  data.train_batch_size: 16\n";
    let orch = Orch::new()
        .file("experiments/dup.yaml", body)
        .file("experiments/bom.yaml", &format!("\u{feff}{body}"))
        .file(
            "experiments/my run ü.yaml",
            "template: verl-grpo\nprofile: a40\n",
        );
    std::fs::write(
        orch.path().join("experiments/bin.yaml"),
        [0x7f, b'E', b'L', b'F', 0xff, 0xfe, 0x00],
    )
    .unwrap();
    for (name, says) in [
        ("dup", "duplicate entry with key \"data.train_batch_size\""),
        ("bom", "byte-order mark"),
        ("bin", "not a text file"),
        ("my run ü", "is not a valid experiment name"),
    ] {
        let run = refused(&orch, name, &[]);
        assert!(
            run.stderr.contains(says) && run.stderr.contains("experiments/"),
            "{name}: {run:?}"
        );
    }
}

/// A profile that describes impossible hardware is refused naming the key; `orch profiles`
/// still lists the others, names the broken one on stderr, and exits 2.
#[test]
fn impossible_profiles_are_refused_and_the_rest_still_listed() {
    let a40 =
        std::fs::read_to_string(crate::support::repo_root().join("profiles/a40.yaml")).unwrap();
    let orch = Orch::new()
        .file(
            "profiles/zero.yaml",
            &a40.replace("memory_gib: 44.42", "memory_gib: 0")
                .replace("per_node: 8", "per_node: 0"),
        )
        .file(
            "profiles/negative.yaml",
            &a40.replace("memory_gib: 512", "memory_gib: -5"),
        );
    let run = refused(&orch, "diamonds-seed0", &["--profile", "zero"]);
    assert!(
        run.stderr.contains("gpu.memory_gib = 0") && run.stderr.contains("gpu.per_node = 0"),
        "{run:?}"
    );
    let list = orch.expect(&["profiles"], 2);
    assert!(
        list.stdout.contains("a40 ") && list.stdout.contains("h100-80g"),
        "{list:?}"
    );
    assert!(
        list.stderr.contains("profile `zero` is not usable")
            && list.stderr.contains("profile `negative` is not usable")
            && list.stderr.contains("host.memory_gib = -5"),
        "{list:?}"
    );
}

/// Completions and the man page come from the clap definitions: every subcommand is in them.
#[test]
fn completions_and_the_man_page_know_every_subcommand() {
    let orch = Orch::new();
    for shell in ["bash", "zsh", "fish"] {
        let run = orch.expect(&["completions", shell], 0);
        for sub in ["submit", "resume", "estimate", "history", "ladder"] {
            assert!(run.stdout.contains(sub), "{shell} lacks {sub}");
        }
    }
    let man = orch.expect(&["man"], 0);
    assert!(
        man.stdout.starts_with(".ie") && man.stdout.contains(".TH orch 1"),
        "{man:?}"
    );
    orch.expect(&["completions", "tcsh"], 2);
}

/// `classify` with one readable and one missing log: JSON for the first (its evidence shaped as
/// in `history --json`), the second named on stderr, exit 2.
#[test]
fn classify_reports_what_it_can_read_and_names_what_it_cannot() {
    let orch = Orch::new();
    let log = crate::support::repo_root()
        .join("crates/orch-classify/tests/fixtures/verl-gpu-oom-ray-wrapped.log");
    let run = orch.expect(
        &["classify", log.to_str().unwrap(), "missing.log", "--json"],
        2,
    );
    assert!(run.stderr.contains("cannot read missing.log"), "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let list = json.as_array().unwrap();
    assert_eq!(list.len(), 1, "{json}");
    assert_eq!(list[0]["class"], "gpu_oom");
    let evidence = &list[0]["evidence"];
    for key in ["file", "line", "text", "memory"] {
        assert!(!evidence[key].is_null(), "{key} missing in {evidence}");
    }
}

/// `classify -v` says why: the rule that decided and the decorations peeled off its line; and
/// for a log whose memory words stand outside a reporting position (`none` as it reads), what
/// a failed job's reading would decide instead.
#[test]
fn classify_verbose_names_the_rule_and_a_failed_jobs_reading() {
    let orch = Orch::new();
    let oom = orch.path().join("oom.log");
    std::fs::write(
        &oom,
        "gpu-q-13: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    )
    .unwrap();
    let run = orch.expect(&["classify", "-v", oom.to_str().unwrap()], 0);
    assert!(run.stdout.contains(": gpu_oom (line 1)"), "{run:?}");
    assert!(run.stdout.contains("  rule: "), "{run:?}");
    assert!(
        run.stdout.contains("  peeled host: \"gpu-q-13: \""),
        "{run:?}"
    );
    assert!(!run.stdout.contains("if the job failed"), "{run:?}");
    let loose = orch.path().join("loose.log");
    std::fs::write(
        &loose,
        "step 1\nrank 3 stopped after CUDA out of memory during backward\n",
    )
    .unwrap();
    let run = orch.expect(&["classify", "-v", loose.to_str().unwrap()], 0);
    assert!(run.stdout.contains(": none\n"), "{run:?}");
    assert!(
        run.stdout
            .contains("  if the job failed: gpu_oom (likely, line 2): rank 3 stopped"),
        "{run:?}"
    );
}

/// `-q` prints results and errors, as its help says: a run that fails says so.
#[test]
fn quiet_still_reports_how_a_run_ended() {
    let orch = Orch::new();
    let run = orch.expect(
        &[
            "-q",
            "submit",
            "--backend",
            "local",
            "pretrain-512m",
            "--profile",
            "rtx4090",
            "--max-attempts",
            "1",
        ],
        1,
    );
    assert!(run.stderr.contains("[pretrain-512m] failed:"), "{run:?}");
    assert!(!run.stderr.contains("submitted"), "{run:?}");
}

/// The data commands speak JSON: `experiments` as objects, `render` what it wrote, `ladder`
/// one path per failure class (so lowering vLLM's share for a KV-cache failure is never
/// followed by raising it again for another class on one line).
#[test]
fn data_commands_speak_json() {
    let orch = Orch::new();
    let list = orch.expect(&["experiments", "--json"], 0).json();
    let diamonds = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "diamonds")
        .unwrap();
    assert_eq!(
        diamonds["members"].as_array().unwrap().len(),
        5,
        "{diamonds}"
    );
    assert_eq!(diamonds["template"], "verl-grpo");
    let render = orch
        .expect(&["render", "diamonds-seed0", "--out", "r", "--json"], 0)
        .json();
    assert!(
        render["plan"].as_str().unwrap().ends_with("r/plan.yaml"),
        "{render}"
    );
    assert_eq!(render["files"].as_array().unwrap().len(), 2, "{render}");
    let ladder = orch
        .expect(&["ladder", "diamonds-seed0", "--json"], 0)
        .json();
    let classes = ladder["classes"].as_object().unwrap();
    for (class, steps) in classes {
        for step in steps.as_array().unwrap() {
            let answers = step["answers"].as_array().unwrap();
            assert!(answers.iter().any(|a| a == class), "{class}: {step}");
        }
    }
    assert!(
        classes["gpu_oom"][0]["gpu_peak_gib"].is_number(),
        "{ladder}"
    );
}

#[test]
fn a_wrong_architecture_is_refused_and_an_unreadable_one_is_unknown() {
    let base = include_str!("../../../experiments/diamonds.yaml");
    let with =
        |arch: &str| base.replace("\nseed: 0\n", &format!("\nseed: 0\narchitecture: {arch}\n"));
    // Read, but no model has it: a mistake in the experiment, refused before anything exists.
    let orch = Orch::new().file(
        "experiments/wrong.yaml",
        &with("{hidden_size: 0, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 8, vocab_size: 10}"),
    );
    let run = refused(&orch, "wrong-seed0", &[]);
    assert!(run.stderr.contains("hidden_size"), "{run:?}");
    assert!(run.stderr.contains("nothing was submitted"), "{run:?}");
    // A path this machine cannot read may be the cluster's: submitted, the architecture
    // unknown (`estimate::an_unreadable_architecture_path_is_named_and_the_architecture_unknown`).
    let orch = Orch::new().file("experiments/far.yaml", &with("/cluster/only/config.json"));
    orch.submit_local("far-seed0", &["--max-attempts", "1"], 1);
}

#[test]
fn more_than_one_node_is_refused_where_orch_cannot_run_it() {
    let orch = Orch::new();
    // A template that cannot spread over nodes says why, and nothing is created.
    let run = orch.expect(
        &[
            "render",
            "gsm8k-areal",
            "--set",
            "resources.nodes=2",
            "--out",
            "areal",
        ],
        2,
    );
    assert!(
        run.stderr.contains("runs on one node only")
            && run.stderr.contains("areal.infra.launcher.slurm"),
        "{run:?}"
    );
    assert!(!orch.path().join("areal").exists());
    let run = orch.expect(
        &["render", "rl-swarm-qwen", "--set", "resources.nodes=2"],
        2,
    );
    assert!(run.stderr.contains("runs on one node only"), "{run:?}");
    // A backend of one machine cannot allocate two nodes.
    let run = orch.expect(
        &[
            "submit",
            "pretrain-512m",
            "--backend",
            "local",
            "--simulate",
            "--set",
            "resources.nodes=2",
        ],
        2,
    );
    assert!(run.stderr.contains("needs the Slurm backend"), "{run:?}");
    assert!(
        !orch.path().join(".orch/runs").exists()
            || std::fs::read_dir(orch.path().join(".orch/runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn two_nodes_render_srun_with_a_rendezvous_and_a_ray_cluster() {
    let orch = Orch::new();
    orch.expect(
        &[
            "render",
            "pretrain-512m",
            "--set",
            "resources.nodes=2",
            "--out",
            "t",
        ],
        0,
    );
    let script = std::fs::read_to_string(orch.path().join("t/run_train.sh")).unwrap();
    for needle in [
        "srun --nodes=2 --ntasks-per-node=1",
        "--rdzv_backend=c10d --rdzv_endpoint=\"$head_node:$rdzv_port\"",
        "torchrun --nnodes=2 --nproc_per_node=4",
    ] {
        assert!(script.contains(needle), "{needle}:\n{script}");
    }
    let job = std::fs::read_to_string(orch.path().join("t/job.sbatch")).unwrap();
    assert!(job.contains("#SBATCH --nodes=2"), "{job}");
    orch.expect(
        &[
            "render",
            "diamonds-seed0",
            "--set",
            "resources.nodes=2",
            "--out",
            "v",
        ],
        0,
    );
    let script = std::fs::read_to_string(orch.path().join("v/run_grpo.sh")).unwrap();
    for needle in [
        "ray start --head",
        "ray start --address=\"$RAY_ADDRESS\"",
        "srun --overlap --nodes=1 --ntasks=1 -w \"$head_node\"",
        "trainer.nnodes=2",
    ] {
        assert!(script.contains(needle), "{needle}:\n{script}");
    }
}

#[test]
fn an_experiments_own_allocation_replaces_the_one_orch_derives() {
    let orch = Orch::new();
    orch.expect(
        &[
            "render",
            "gsm8k-areal",
            "--set",
            "+allocation_mode=sglang:d1p1t1+fsdp:d1p1t1",
            "--out",
            "a",
        ],
        0,
    );
    let script = std::fs::read_to_string(orch.path().join("a/run_areal.sh")).unwrap();
    assert_eq!(script.matches("allocation_mode=").count(), 1, "{script}");
    assert!(
        script.contains("    +allocation_mode=sglang:d1p1t1+fsdp:d1p1t1 \\\n"),
        "{script}"
    );
}
