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
            let vars = common_vars(ctx, r, "update_actor")
                .set(
                    "oom",
                    report::torch_oom_message(d, &[], OwnProcess::ThisProcess),
                )
                .block("site_frames", super::site_frames(d.site));
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
        FailKind::SglangNotEnough { .. } => unreachable!("verl uses vLLM"),
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
