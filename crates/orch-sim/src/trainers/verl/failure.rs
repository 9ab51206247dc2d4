//! verl's failure output, per failure kind: the worker's error, Hydra's banner and the driver's
//! Ray-wrapped traceback down to the worker's exception (torch OOM in `update_actor`, vLLM
//! start-up and wake-up errors, Ray's host-memory monitor, too few GPUs), as the real run
//! prints it to stderr. The text is `outputs/verl/*.txt`; this file picks the template and fills
//! in the pids, actor ids and messages.

use super::Run;
use crate::Ctx;
use crate::outputs::Vars;
use crate::report::{self, OwnProcess, RayOom};
use orch_memory::estimate::{FailAt, FailKind, Failure};

/// What every verl failure output names: the overrides Hydra echoes, the TaskRunner, the
/// WorkerDict (whose failing method is `method`) and the vLLM engine process.
fn common_vars(ctx: &Ctx, r: &Run, method: &str) -> Vars {
    let given: Vec<String> = r.o.given.iter().map(|g| format!("'{g}'")).collect();
    let (taskrunner_actor, taskrunner_addr) = report::ray_actor(&ctx.ids, "TaskRunner.run");
    let (worker_actor, worker_addr) =
        report::ray_actor(&ctx.ids, &format!("WorkerDict.actor_rollout_ref_{method}"));
    Vars::new()
        .set("overrides", given.join(", "))
        .set("taskrunner", r.taskrunner)
        .set("taskrunner_actor", taskrunner_actor)
        .set("taskrunner_addr", taskrunner_addr)
        .set("worker", r.worker)
        .set("worker_actor", worker_actor)
        .set("worker_addr", worker_addr)
        .set("engine", r.engine)
}

/// The phase of a step a GPU OOM happened in, as the estimate labels it (`old-log-prob pass
/// (compute_log_prob): …`), with what verl's traceback names for it: the driver's call
/// (`ray_trainer.py` `fit`), the worker's method and, for the critic, its module. verl at
/// b178a3cd5: `ray_trainer.py` L1180-1299, `fsdp_workers.py` L1012, L1058, L1550, L1570,
/// `dp_actor.py` L472, `dp_critic.py` L178, L230.
struct Pass {
    /// The role and method Ray names the task after (`actor_rollout_ref_update_actor`).
    role: &'static str,
    method: &'static str,
    trainer_call: &'static str,
    /// `fsdp_workers.py`'s frame: its line and the call into the actor or critic.
    worker_frame: (u32, &'static str),
    /// The actor's or critic's own frame replacing `dp_actor.py`'s `update_policy`, for a pass
    /// other than the update: (file, line, function, the `_forward_micro_batch` call).
    inner_frame: Option<(&'static str, u32, &'static str, &'static str)>,
    critic: bool,
}

impl Pass {
    fn of(label: &str) -> Self {
        let update = Self {
            role: "actor_rollout_ref",
            method: "update_actor",
            trainer_call: "actor_output = self.actor_rollout_wg.update_actor(batch)",
            worker_frame: (868, "metrics = self.actor.update_policy(data=data)"),
            inner_frame: None,
            critic: false,
        };
        let log_prob = (
            "actor/dp_actor.py",
            472,
            "compute_log_prob",
            "outputs = self._forward_micro_batch(",
        );
        let phase = label.split(": ").next().unwrap_or("");
        match phase {
            "old-log-prob pass (compute_log_prob)" => Self {
                method: "compute_log_prob",
                trainer_call: "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)",
                worker_frame: (
                    1012,
                    "outputs = self.actor.compute_log_prob(data=data, calculate_entropy=calculate_entropy)",
                ),
                inner_frame: Some(log_prob),
                ..update
            },
            "reference log-prob pass (compute_ref_log_prob)" => Self {
                method: "compute_ref_log_prob",
                trainer_call: "ref_log_prob = self.ref_policy_wg.compute_ref_log_prob(batch)",
                worker_frame: (
                    1058,
                    "outputs = self.ref_policy.compute_log_prob(data=data, calculate_entropy=False)",
                ),
                inner_frame: Some(log_prob),
                ..update
            },
            "critic values pass (compute_values)" => Self {
                role: "critic",
                method: "compute_values",
                trainer_call: "values = self.critic_wg.compute_values(batch)",
                worker_frame: (1550, "values = self.critic.compute_values(data=data)"),
                inner_frame: Some((
                    "critic/dp_critic.py",
                    178,
                    "compute_values",
                    "values = self._forward_micro_batch(model_inputs)",
                )),
                critic: true,
            },
            "critic update (update_critic)" => Self {
                role: "critic",
                method: "update_critic",
                trainer_call: "critic_output = self.critic_wg.update_critic(batch)",
                worker_frame: (1570, "metrics = self.critic.update_critic(data=data)"),
                inner_frame: Some((
                    "critic/dp_critic.py",
                    230,
                    "update_critic",
                    "vpreds = self._forward_micro_batch(model_inputs)",
                )),
                critic: true,
            },
            _ => update,
        }
    }

    /// Ray's task name: `actor_rollout_ref_update_actor`.
    fn task(&self) -> String {
        format!("{}_{}", self.role, self.method)
    }

    /// `update_actor`'s frames for the failing site (`frames/verl_*.txt`) as this pass prints
    /// them: `fsdp_workers.py`'s frame is this pass's method; `dp_actor.py`'s `update_policy`
    /// frame, where the site passes through it on the way to the forward, is this pass's own
    /// function; the critic's frames name its files and module.
    fn frames(&self, update_frames: &str) -> String {
        if self.method == "update_actor" {
            return update_frames.to_string();
        }
        let mut lines: Vec<String> = update_frames.lines().map(str::to_string).collect();
        let workers = "verl/workers/fsdp_workers.py";
        if let Some(i) = lines.iter().position(|l| l.contains(workers)) {
            let (line, code) = self.worker_frame;
            let at = &lines[i][..lines[i].find(workers).unwrap_or(0)];
            lines[i] = format!("{at}{workers}\", line {line}, in {}", self.method);
            if let Some(next) = lines.get_mut(i + 1) {
                *next = format!("    {code}");
            }
        }
        let policy = lines.iter().position(|l| l.ends_with("in update_policy"));
        if let (Some((file, line, function, call)), Some(i)) = (self.inner_frame, policy) {
            if lines
                .get(i + 1)
                .is_some_and(|c| c.contains("_forward_micro_batch("))
            {
                let at = &lines[i][..lines[i].find("verl/workers/").unwrap_or(0)];
                lines[i] = format!("{at}verl/workers/{file}\", line {line}, in {function}");
                lines[i + 1] = format!("    {call}");
            } else if self.critic {
                lines[i] = lines[i].replace("in update_policy", &format!("in {function}"));
            }
        }
        let mut text = lines.join("\n");
        if self.critic {
            for (actor, critic) in [
                (
                    "verl/workers/actor/dp_actor.py",
                    "verl/workers/critic/dp_critic.py",
                ),
                ("self.actor_module(", "self.critic_module("),
                ("self.actor_module_fsdp", "self.critic_module"),
                ("self.actor_optimizer", "self.critic_optimizer"),
            ] {
                text = text.replace(actor, critic);
            }
        }
        if update_frames.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

/// vLLM's start-up error and the template it is printed in.
fn vllm_start_up(kind: &FailKind) -> Option<(&'static str, String)> {
    match kind {
        FailKind::VllmFreeMemory {
            free_gib,
            total_gib,
            util,
            requested_gib,
        } => Some((
            super::messages::VLLM_INIT_DEVICE,
            report::vllm_free_memory(*free_gib, *total_gib, *util, *requested_gib),
        )),
        FailKind::VllmNoCacheBlocks { .. } => Some((
            super::messages::VLLM_KV_CACHE,
            report::vllm_no_cache_blocks(),
        )),
        FailKind::VllmMaxLen {
            max_model_len,
            needed_gib,
            available_gib,
            estimated_max_len,
        } => Some((
            super::messages::VLLM_KV_CACHE,
            report::vllm_max_len(
                *max_model_len,
                *needed_gib,
                *available_gib,
                *estimated_max_len,
            ),
        )),
        _ => None,
    }
}

/// The template for `f` and its values.
fn fill(ctx: &Ctx, r: &Run, f: &Failure) -> (&'static str, Vars) {
    if let Some((template, message)) = vllm_start_up(&f.kind) {
        let vars = common_vars(ctx, r, "init_model")
            .set("vllm_time", report::Stamp::now().vllm())
            .set("message", message);
        return (template, vars);
    }
    match &f.kind {
        FailKind::GpuOom(d) => {
            let pass = Pass::of(&d.label);
            let vars = common_vars(ctx, r, pass.method)
                .set(
                    "oom",
                    report::torch_oom_message(d, &[r.engine], OwnProcess::ThisProcess),
                )
                .set("trainer_call", pass.trainer_call)
                .set("worker_task", pass.task())
                .block("site_frames", pass.frames(super::site_frames(d.site)));
            (super::messages::GPU_OOM, vars)
        }
        FailKind::VllmWakeUp { .. } => (
            super::messages::VLLM_WAKE_UP,
            common_vars(ctx, r, "generate_sequences"),
        ),
        FailKind::HostOom {
            used_gib,
            total_gib,
            worker_gib,
            task,
        } => {
            let ray_oom = report::ray_host_oom(&RayOom {
                ids: &ctx.ids,
                task_name: task,
                pid: r.worker,
                worker_gb: *worker_gib,
                used_gb: *used_gib,
                total_gb: *total_gib,
            });
            let vars = common_vars(ctx, r, "update_actor")
                .set("ray_time", report::Stamp::now().ray())
                .set("raylet", ctx.ids.pid("raylet"))
                .set("node", ctx.ids.hex("node", 56))
                .set("ray_oom", ray_oom);
            let template = if f.at == FailAt::Init {
                super::messages::HOST_OOM_INIT
            } else {
                super::messages::HOST_OOM_UPDATE
            };
            (template, vars)
        }
        FailKind::NotEnoughGpus {
            available,
            required,
        } => {
            let vars = common_vars(ctx, r, "init_workers")
                .set("available", available)
                .set("required", required);
            (super::messages::NOT_ENOUGH_GPUS, vars)
        }
        FailKind::SglangResume { .. } => (
            super::messages::SGLANG_RESUME,
            common_vars(ctx, r, "generate_sequences").set("ray_time", report::Stamp::now().ray()),
        ),
        FailKind::SglangNotEnough { .. } => (
            super::messages::SGLANG_NOT_ENOUGH,
            common_vars(ctx, r, "init_model")
                .set("sglang_time", report::Stamp::now().sglang())
                .set("message", report::sglang_not_enough()),
        ),
        FailKind::VllmFreeMemory { .. }
        | FailKind::VllmNoCacheBlocks { .. }
        | FailKind::VllmMaxLen { .. } => unreachable!("handled above"),
    }
}

/// Print the real failure output for `f` and return verl's exit code (1).
pub(super) fn fail_exit(ctx: &mut Ctx, r: &Run, f: &Failure) -> i32 {
    let (template, vars) = fill(ctx, r, f);
    ctx.err_template(template, &vars);
    ctx.finish(
        1,
        &format!("simulated verl failure: {}", crate::describe(f)),
    )
}
