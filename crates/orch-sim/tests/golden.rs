//! Pins the simulator's complete output, byte for byte, for one configuration per failure kind
//! and per trainer (plus the successful and resumed runs). The classifier's fixtures and the
//! end-to-end tests depend on these formats, so any change to them must be deliberate:
//! regenerate with `ORCH_SIM_BLESS=1 cargo test -p orch-sim --test golden` and review the diff.
//!
//! Only what differs between machines or moments is masked: wall-clock timestamps and the host
//! name. Process ids, actor ids and metrics are deterministic functions of the arguments, which
//! include the checkpoint directory; that is why the cases use the same *relative* paths on
//! every machine: the test moves into a fresh temporary directory first (it is this binary's
//! only test, so changing the process's directory disturbs nothing), so any user can run it and
//! two runs at once never share a checkpoint.

use std::path::{Path, PathBuf};

use orch_sim::{SimEnv, Sink};
use regex::Regex;

/// Output in order, each line tagged with its stream; never sleeps or hangs.
#[derive(Default)]
struct Capture {
    text: String,
}

impl Sink for Capture {
    fn out(&mut self, line: &str) {
        self.text.push_str(&format!("out| {line}\n"));
    }
    fn err(&mut self, line: &str) {
        self.text.push_str(&format!("err| {line}\n"));
    }
    fn sleep(&mut self, _secs: f64) {}
    fn hang(&mut self) {
        self.text.push_str("-- hang --\n");
    }
}

struct Case {
    name: &'static str,
    trainer: &'static str,
    env: &'static [(&'static str, &'static str)],
    args: Vec<String>,
}

const H100: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("USER", "golden"),
];
const H100_EXP: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("USER", "golden"),
];
const H100_HOST48: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "48"),
    ("USER", "golden"),
];
const RTX4090: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA GeForce RTX 4090"),
    ("ORCH_SIM_GPU_MEM_GIB", "23.65"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "256"),
    ("USER", "golden"),
];
const A40_4: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA A40"),
    ("ORCH_SIM_GPU_MEM_GIB", "44.42"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("USER", "golden"),
];
const A40_1: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA A40"),
    ("ORCH_SIM_GPU_MEM_GIB", "44.42"),
    ("ORCH_SIM_GPUS", "1"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("USER", "golden"),
];
const A40_HOST8: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA A40"),
    ("ORCH_SIM_GPU_MEM_GIB", "44.42"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "8"),
    ("USER", "golden"),
];
const HANG: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("ORCH_SIM_HANG_AT_STEP", "2"),
    ("USER", "golden"),
];
const STEPS6: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("ORCH_SIM_STEPS", "6"),
    ("USER", "golden"),
];
const H100_HOST4T: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "4096"),
    ("USER", "golden"),
];
const RTX4090_1: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA GeForce RTX 4090"),
    ("ORCH_SIM_GPU_MEM_GIB", "23.65"),
    ("ORCH_SIM_GPUS", "1"),
    ("ORCH_SIM_HOST_MEM_GIB", "120"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("USER", "golden"),
];
const H100_V06: &[(&str, &str)] = &[
    ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
    ("ORCH_SIM_GPUS", "4"),
    ("ORCH_SIM_HOST_MEM_GIB", "512"),
    ("ORCH_SIM_TRAINER_VERSION", "0.6.1"),
    ("USER", "golden"),
];
const NOTHING: &[(&str, &str)] = &[("USER", "golden")];

/// The directory every case writes under, relative to the test's temporary directory (see the
/// module docs for why it is the same everywhere).
const WORK: &str = "orch-sim-golden";

fn work(case: &str) -> PathBuf {
    Path::new(WORK).join(case)
}

fn kv(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Seed 002's diamonds-seed0 run as first submitted, checkpointing into `dir`.
fn diamonds(dir: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let mut v = kv(&[
        ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-7B-Instruct"),
        ("data.train_batch_size", "1024"),
        ("data.max_prompt_length", "512"),
        ("data.max_response_length", "1024"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "256"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "32"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", "False"),
        (
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "False",
        ),
        (
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            "True",
        ),
        ("actor_rollout_ref.rollout.n", "5"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
        // GRPO (verl's default estimator is GAE, with a critic), with seed 002's entropy term.
        ("algorithm.adv_estimator", "grpo"),
        ("actor_rollout_ref.actor.entropy_coeff", "0.001"),
        ("trainer.n_gpus_per_node", "4"),
        ("trainer.nnodes", "1"),
    ]);
    v.push(format!("trainer.default_local_dir={}", work(dir).display()));
    v.extend(kv(extra));
    v
}

fn areal(dir: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let mut v = vec![
        "examples/math/gsm8k_grpo.py".to_string(),
        format!("cluster.fileroot={}", work(dir).display()),
    ];
    v.extend(kv(&[
        ("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("sglang.mem_fraction_static", "0.8"),
        ("train_dataset.batch_size", "8"),
        ("gconfig.max_new_tokens", "512"),
        ("actor.mb_spec.max_tokens_per_mb", "5120"),
        ("rollout.max_concurrent_rollouts", "32"),
        ("actor.gradient_checkpointing", "false"),
    ]));
    v.extend(kv(extra));
    v
}

const A40_OPT: &[(&str, &str)] = &[
    ("sglang.mem_fraction_static", "0.5"),
    ("train_dataset.batch_size", "4"),
    ("gconfig.max_new_tokens", "256"),
    ("actor.mb_spec.max_tokens_per_mb", "4096"),
    ("rollout.max_concurrent_rollouts", "16"),
    ("actor.gradient_checkpointing", "true"),
    ("recover.mode", "auto"),
];

/// A torchrun YAML config in the case's directory (written before the run).
fn torchrun(dir: &str, body: &str, extra: &[&str]) -> Vec<String> {
    let d = work(dir);
    std::fs::create_dir_all(&d).unwrap();
    let cfg = d.join("train.yaml");
    std::fs::write(&cfg, body).unwrap();
    let mut v = vec![
        "training/train.py".to_string(),
        "--config".to_string(),
        cfg.display().to_string(),
        "--output_dir".to_string(),
        d.join("out").display().to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn tr_cfg(micro: u32, seq: u32, ckpt: bool, precision: &str) -> String {
    format!(
        "model:\n  params_m: 512\n  n_layers: 8\ntraining:\n  micro_batch_size: {micro}\n  gradient_accumulation_steps: 4\n  max_seq_len: {seq}\n  gradient_checkpointing: {ckpt}\n  precision: {precision}\n"
    )
}

/// Seed 004's rl-swarm node as templates/rl-swarm launches it (float32, no checkpointing,
/// Qwen2.5-1.5B), its config file not on this machine, with `extra` overrides.
fn rl_swarm(dir: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let mut v = vec![
        "--config-path".to_string(),
        "/nonexistent/rl-swarm/rgym_exp/config".into(),
        "--config-name".into(),
        "rg-swarm.yaml".into(),
    ];
    v.extend(kv(&[
        (
            "++game_manager.trainer.config.enable_gradient_checkpointing",
            "false",
        ),
        ("game_manager.data_manager.num_train_samples", "2"),
        (
            "game_manager.trainer.models.0.pretrained_model_name_or_path",
            "Gensyn/Qwen2.5-1.5B-Instruct",
        ),
        ("training.dtype", "float32"),
    ]));
    v.push(format!("log_dir={}", work(dir).display()));
    v.extend(kv(extra));
    v
}

// Long on purpose: one flat list of every pinned case reads better than a list split up.
fn cases() -> Vec<Case> {
    let c = |name, trainer, env, args| Case {
        name,
        trainer,
        env,
        args,
    };
    let m = |v: &'static str| ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", v);
    let po = ("actor_rollout_ref.actor.fsdp_config.param_offload", "True");
    let oo = (
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "True",
    );
    let util = |v: &'static str| ("actor_rollout_ref.rollout.gpu_memory_utilization", v);
    let sglang = ("actor_rollout_ref.rollout.name", "sglang");
    vec![
        c("verl-oom-softmax", "verl", H100, diamonds("v1", &[])),
        c("verl-oom-expandable", "verl", H100_EXP, diamonds("v2", &[])),
        // verl 0.6 turns expandable segments on for training itself.
        c("verl-release-0.6", "verl", H100_V06, diamonds("v21", &[])),
        c("verl-fits", "verl", H100_EXP, diamonds("v3", &[m("16")])),
        c("verl-resumed", "verl", STEPS6, diamonds("v3", &[m("16")])),
        c("verl-done", "verl", H100_EXP, diamonds("v3", &[m("16")])),
        c("verl-hang", "verl", HANG, diamonds("v4", &[m("16")])),
        c(
            "verl-no-kv-cache",
            "verl",
            RTX4090,
            diamonds("v5", &[util("0.1")]),
        ),
        c(
            "verl-max-len",
            "verl",
            RTX4090,
            diamonds(
                "v6",
                &[
                    util("0.7"),
                    po,
                    ("actor_rollout_ref.rollout.max_model_len", "32768"),
                ],
            ),
        ),
        // SGLang as verl's rollout: no room for its pool at start-up; its resume at step 2,
        // once AdamW's state sits in memory the pool was sized without.
        c(
            "verl-sglang-no-pool",
            "verl",
            H100_HOST4T,
            diamonds("v20", &[sglang, util("0.2")]),
        ),
        c(
            "verl-sglang-resume",
            "verl",
            H100_HOST4T,
            diamonds("v21", &[sglang, util("0.9"), m("2")]),
        ),
        c(
            "verl-free-memory",
            "verl",
            RTX4090,
            diamonds("v7", &[util("0.7")]),
        ),
        c(
            "verl-4090-later-oom",
            "verl",
            RTX4090,
            diamonds(
                "v8",
                &[
                    util("0.7"),
                    po,
                    ("actor_rollout_ref.rollout.max_model_len", "4096"),
                ],
            ),
        ),
        c(
            "verl-host-oom-init",
            "verl",
            H100_HOST48,
            diamonds("v9", &[po, oo, m("16")]),
        ),
        c(
            "verl-host-oom-update",
            "verl",
            H100_HOST48,
            diamonds("v10", &[oo, m("16")]),
        ),
        c("verl-wake-up", "verl", A40_4, diamonds("v11", &[m("4")])),
        c(
            "verl-wake-up-resumed",
            "verl",
            A40_4,
            diamonds("v11", &[m("4")]),
        ),
        c(
            "verl-no-ckpt",
            "verl",
            A40_4,
            diamonds(
                "v12",
                &[
                    m("8"),
                    po,
                    oo,
                    (
                        "actor_rollout_ref.model.enable_gradient_checkpointing",
                        "False",
                    ),
                ],
            ),
        ),
        c(
            "verl-params",
            "verl",
            H100_HOST4T,
            diamonds(
                "v13",
                &[
                    ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-72B-Instruct"),
                    po,
                    oo,
                    util("0.5"),
                    ("actor_rollout_ref.rollout.tensor_model_parallel_size", "4"),
                    ("actor_rollout_ref.actor.use_kl_loss", "True"),
                    ("actor_rollout_ref.ref.fsdp_config.param_offload", "False"),
                    ("data.max_response_length", "128"),
                    m("1"),
                ],
            ),
        ),
        c(
            "verl-gpus",
            "verl",
            H100,
            diamonds("v14", &[("trainer.n_gpus_per_node", "8")]),
        ),
        c(
            "verl-defaults",
            "verl",
            NOTHING,
            vec![
                "trainer.n_gpus_per_node=4".into(),
                format!("trainer.default_local_dir={}", work("v15").display()),
            ],
        ),
        c("areal-oom-1gpu", "areal", A40_1, areal("a1", &[])),
        c("areal-oom-4gpu", "areal", A40_4, areal("a2", &[])),
        c("areal-fits", "areal", A40_4, areal("a3", A40_OPT)),
        c("areal-recovered", "areal", STEPS6, areal("a3", A40_OPT)),
        c(
            "areal-sglang",
            "areal",
            A40_4,
            areal("a4", &[("sglang.mem_fraction_static", "0.05")]),
        ),
        c("areal-host-oom", "areal", A40_HOST8, areal("a5", &[])),
        c(
            "areal-oom-optim",
            "areal",
            A40_1,
            areal(
                "a9",
                &[
                    ("actor.gradient_checkpointing", "true"),
                    ("actor.mb_spec.max_tokens_per_mb", "16384"),
                    ("sglang.mem_fraction_static", "0.35"),
                ],
            ),
        ),
        c(
            "areal-oom-grads",
            "areal",
            A40_1,
            areal(
                "a10",
                &[
                    ("actor.gradient_checkpointing", "true"),
                    ("actor.mb_spec.max_tokens_per_mb", "16384"),
                    ("sglang.mem_fraction_static", "0.48"),
                ],
            ),
        ),
        c(
            "areal-oom-logits",
            "areal",
            A40_4,
            areal(
                "a8",
                &[
                    ("actor.gradient_checkpointing", "true"),
                    ("actor.mb_spec.max_tokens_per_mb", "65536"),
                    ("sglang.mem_fraction_static", "0.3"),
                ],
            ),
        ),
        c(
            "areal-bad-config",
            "areal",
            A40_4,
            vec![
                "--config".into(),
                "/nonexistent/orch-sim-golden.yaml".into(),
            ],
        ),
        c(
            "torchrun-oom-attention",
            "torchrun",
            A40_4,
            torchrun("t1", &tr_cfg(8, 2048, true, "bf16"), &[]),
        ),
        c(
            "torchrun-oom-no-ckpt",
            "torchrun",
            A40_4,
            torchrun("t2", &tr_cfg(1, 1024, false, "fp32"), &[]),
        ),
        c(
            "torchrun-fits",
            "torchrun",
            A40_4,
            torchrun(
                "t3",
                &tr_cfg(2, 1024, true, "bf16"),
                &["--nproc_per_node", "2"],
            ),
        ),
        c("torchrun-resumed", "torchrun", STEPS6, {
            let mut v = torchrun("t3", &tr_cfg(2, 1024, true, "bf16"), &[]);
            v.push("--resume_from".into());
            v.push(work("t3").join("out/step_4").display().to_string());
            v
        }),
        c(
            "torchrun-host-oom",
            "torchrun",
            A40_HOST8,
            torchrun("t4", &tr_cfg(1, 1024, true, "bf16"), &[]),
        ),
        c(
            "torchrun-big-model",
            "torchrun",
            A40_4,
            torchrun("t5", "model:\n  params_m: 2000\nmicro_batch_size: 1\n", &[]),
        ),
        // The architecture stated in the config: the estimate is computed from it, and the
        // largest tensor, the fp32 logits at the loss, is what fails.
        c(
            "torchrun-architecture-oom-at-the-loss",
            "torchrun",
            A40_4,
            torchrun(
                "t6",
                "model:\n  architecture:\n    model_type: llama\n    hidden_size: 2048\n    num_hidden_layers: 16\n    num_attention_heads: 32\n    num_key_value_heads: 8\n    intermediate_size: 8192\n    vocab_size: 128256\n    tie_word_embeddings: true\nmicro_batch_size: 8\nmax_seq_len: 4096\ngradient_checkpointing: true\nprecision: bf16\n",
                &[],
            ),
        ),
        c(
            "torchrun-bad-config",
            "torchrun",
            A40_4,
            vec![
                "training/train.py".into(),
                "--config".into(),
                "/nonexistent/orch-sim-golden.yaml".into(),
            ],
        ),
        c("rl-swarm-oom", "rl-swarm", RTX4090_1, rl_swarm("s1", &[])),
        c(
            "rl-swarm-fits",
            "rl-swarm",
            RTX4090_1,
            rl_swarm(
                "s2",
                &[
                    ("training.dtype", "float16"),
                    (
                        "++game_manager.trainer.config.enable_gradient_checkpointing",
                        "true",
                    ),
                ],
            ),
        ),
        c(
            "rl-swarm-model-too-big",
            "rl-swarm",
            RTX4090_1,
            rl_swarm(
                "s3",
                &[(
                    "game_manager.trainer.models.0.pretrained_model_name_or_path",
                    "Qwen/Qwen2.5-7B-Instruct",
                )],
            ),
        ),
        c("unknown-trainer", "megatron", H100, vec![]),
    ]
}

/// Timestamps and the host name differ between runs; everything else must not.
fn mask(text: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mut s = text.to_string();
    if !host.is_empty() {
        s = s.replace(&format!("hostname: {host},"), "hostname: <HOST>,");
        s = s.replace(&format!("host      : {host}\n"), "host      : <HOST>\n");
    }
    for (re, to) in [
        (r"\d{2}:\d{2}:\d{2}(?:[.,]\d+)?", "<T>"),
        (r"\d{4}-?\d{2}-?\d{2}([-_ ])<T>", "<D>$1<T>"),
        (r"\b\d{2}-\d{2} <T>", "<D> <T>"),
        (r"\b([WE])\d{4} <T>", "$1<D> <T>"),
    ] {
        s = Regex::new(re).unwrap().replace_all(&s, to).into_owned();
    }
    s
}

#[test]
fn output_is_byte_identical_to_the_golden_files() {
    let bless = std::env::var_os("ORCH_SIM_BLESS").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let tmp = tempfile::tempdir().expect("a temporary directory");
    std::env::set_current_dir(tmp.path()).expect("cd into the temporary directory");
    let mut failed = Vec::new();
    for case in cases() {
        let env = SimEnv::from_vars(|k| {
            case.env
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        });
        let mut cap = Capture::default();
        let code = orch_sim::run(case.trainer, &case.args, &env, &mut cap);
        let got = mask(&format!(
            "$ orch sim-train {} {}\nexit {code}\n{}",
            case.trainer,
            case.args.join(" "),
            cap.text
        ));
        let path = dir.join(format!("{}.txt", case.name));
        if bless {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            let line = want
                .lines()
                .zip(got.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(got.lines().count()));
            failed.push(format!(
                "{}: first difference at line {}\n  want: {:?}\n  got:  {:?}",
                case.name,
                line + 1,
                want.lines().nth(line),
                got.lines().nth(line)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
