#!/usr/bin/env bash
# Benchmark `orch classify` against grep/ripgrep with the same signatures on two ~1 GB logs,
# a realistic one and an adversarial one, and print a table per log (seconds, MB/s):
#   orch            orch classify LOG --json
#   grep -E -f      GNU grep with the ERE signatures (`orch classify --dump-patterns`)
#   rg -f           ripgrep with the same patterns
#   rg -F -f        ripgrep with only the literal needles of the signature table
#   cat             reading the file (the floor)
#
#   scripts/bench-classify.sh [SIZE_MB]        (default 1024)
#
# Env: KEEP=1 keeps the generated logs (paths printed); RUNS=N timed runs per tool (default 3);
#      BENCH_DIR=dir generates into (or reuses logs already in) dir instead of a fresh temp
#      dir; NO_BUILD=1 skips cargo; GEN_ONLY=1 only generates the logs (use with BENCH_DIR);
#      LOGS="realistic adversarial" picks the logs (default both).
# Needs hyperfine (falls back to `date` timing) and rg (apt-get install ripgrep; skipped
# when missing), and python3 to extract the needles from crates/orch-classify/src/rules.rs.
#
# The realistic log is a verl-on-Slurm stream: Ray-prefixed progress bars (with `\r`
# rewrites), metric lines, vLLM INFO lines, verl memory reports, recovered warnings
# (vLLM RECOMPUTE preemption, SGLang retract, verl sleep-level), `set -x` echoes, a config
# dump, periodic caught tracebacks, and ONE real CUDA OOM (Ray-wrapped) near the end,
# followed by the NCCL watchdog noise and Hydra's last words.
# Expected verdict: gpu_oom.
#
# The adversarial log is the same stream where every other line holds a signature's words
# in a trap context, rotating through: a yaml `notes: "..."` config value quoting a torch
# OOM, a library tip ("to avoid torch.OutOfMemoryError ..."), a `set -x` echo of a
# `grep -c 'CUDA out of memory'`, its `$ ` prompt form, a verl pprint config dump, a
# WARNING-level logger line, a Python UserWarning, a JSON event quoting the OOM, argparse
# help text, a markdown tip in backticks, and a Slurm line quoted in a yaml hint. The
# classifier must look at each of these lines and reject it. Same ending; expected gpu_oom.
set -euo pipefail

SIZE_MB=${1:-1024}
RUNS=${RUNS:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
export LC_ALL=C

if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }

if [[ -n ${BENCH_DIR:-} ]]; then
    DIR=$BENCH_DIR
    mkdir -p "$DIR"
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench-classify.XXXXXX")
    [[ -n ${KEEP:-} ]] || trap 'rm -rf "$DIR"' EXIT
fi
PATTERNS=$DIR/patterns.ere
LITERALS=$DIR/literals.txt

# ---------------------------------------------------------------- generate the log
gen_block() {
    # ~4 MiB of noise; $1 = block number (varies pids/steps a little).
    awk -v blk="$1" 'BEGIN {
        srand(blk + 7);
        pid = 2841; wpid = 231421 + (blk % 8);
        for (i = 0; i < 9000; i++) {
            step = blk * 9000 + i;
            pct = int((step % 1000) / 10);
            r = i % 50;
            if (r < 20) {
                # tqdm rewrite: several \r segments on one line
                printf "(TaskRunner pid=%d) Training Progress:  %d%%|##        | %d/1000 [12:%02d<1:23:45,  5.%02ds/it]\r", pid, pct, step % 1000, i % 60, i % 100;
                printf "(TaskRunner pid=%d) Training Progress:  %d%%|###       | %d/1000 [12:%02d<1:23:44,  5.%02ds/it]\n", pid, pct, step % 1000 + 1, i % 60, (i + 7) % 100;
            } else if (r < 32) {
                printf "(TaskRunner pid=%d) step:%d - global_seqlen/min:%d - global_seqlen/max:%d - actor/entropy:%.4f - actor/pg_loss:%.5f - actor/pg_clipfrac:%.5f - actor/ppo_kl:%.6f - actor/grad_norm:%.4f - perf/max_memory_allocated_gb:%.2f - perf/max_memory_reserved_gb:%.2f - perf/cpu_memory_used_gb:%.2f - timing_s/gen:%.3f - timing_s/update_actor:%.3f - response_length/mean:%.2f - critic/score/mean:%.4f\n", pid, step, 11000 + i % 977, 15000 + i % 1331, rand(), rand() / 10, rand() / 100, rand() / 1000, rand() * 3, 50 + rand() * 20, 60 + rand() * 15, 100 + rand() * 40, 20 + rand() * 9, 30 + rand() * 9, 300 + rand() * 200, rand();
            } else if (r < 40) {
                printf "(WorkerDict pid=%d) INFO 03-14 14:%02d:%02d [gpu_model_runner.py:1%03d] Graph capturing finished in %d secs, took %.2f GiB\n", wpid, i % 60, (i * 7) % 60, i % 1000, 5 + i % 20, rand();
            } else if (r < 45) {
                printf "(WorkerDict pid=%d) After switch to rollout mode, memory allocated (GB): %.2f, memory reserved (GB): %.2f, device memory used/total (GB): %.2f/79.11\n", wpid, 10 + rand() * 5, 15 + rand() * 5, 55 + rand() * 20;
            } else if (r == 45) {
                printf "(WorkerDict pid=%d) WARNING 03-14 14:33:45 scheduler.py:1057 Sequence group %d is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_cumulative_preemption_cnt=%d\n", wpid, step, i;
            } else if (r == 46) {
                printf "[2025-07-02 07:41:59 DP0 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487\n";
            } else if (r == 47) {
                printf "(WorkerDict pid=%d) WARNING:2025-03-14 14:33:45,123:Setting the sleep level to 1 may cause a memory overflow.\n", wpid;
            } else if (r == 48 && i % 1000 == 48) {
                # a caught, logged exception (wandb retry) with its traceback
                printf "(TaskRunner pid=%d) wandb: Network error (ConnectionError), entering retry loop.\n", pid;
                printf "(TaskRunner pid=%d) Traceback (most recent call last):\n", pid;
                printf "(TaskRunner pid=%d)   File \"/usr/local/lib/python3.10/dist-packages/wandb/sdk/internal/internal_api.py\", line 331, in execute\n", pid;
                printf "(TaskRunner pid=%d)     return self.client.execute(*args, **kwargs)\n", pid;
                printf "(TaskRunner pid=%d)   File \"/usr/local/lib/python3.10/dist-packages/requests/adapters.py\", line 519, in send\n", pid;
                printf "(TaskRunner pid=%d)     raise ConnectionError(e, request=request)\n", pid;
                printf "(TaskRunner pid=%d) requests.exceptions.ConnectionError: HTTPSConnectionPool(host=\047api.wandb.ai\047, port=443): Read timed out.\n", pid;
            } else if (i % 500 == 49) {
                printf "+ echo \047step %d done; if CUDA out of memory appears, lower ppo_micro_batch_size_per_gpu\047\n", step;
            } else {
                printf "(WorkerDict pid=%d) INFO 03-14 14:%02d:%02d [loggers.py:116] Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%\n", wpid, i % 60, i % 60, rand() * 9000, rand() * 3000, i % 256, rand() * 100, rand() * 100;
            }
        }
    }'
}

gen_adversarial_block() {
    # ~4 MiB: realistic noise on odd lines, a trap on even lines.
    gen_block "$1" | awk -v blk="$1" '{
        print;
        k = (NR + blk) % 11;
        if (k == 0) printf "notes: \"attempt %d died with torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.68 GiB; halved ppo_micro_batch_size_per_gpu\"\n", NR;
        else if (k == 1) printf "(TaskRunner pid=2841) [verl] tip: to avoid torch.OutOfMemoryError: CUDA out of memory during update_actor, lower ppo_micro_batch_size_per_gpu (step %d)\n", NR;
        else if (k == 2) printf "++ grep -c \047CUDA out of memory\047 /scratch/runs/qwen7b/attempt-%d/slurm-494583.out\n", NR;
        else if (k == 3) printf "$ grep -c \"RuntimeError: CUDA error: out of memory\" rank%d.log\n", NR % 8;
        else if (k == 4) printf "(TaskRunner pid=2841)  \047trainer\047: {\047experiment_name\047: \047qwen7b-CUDA out of memory-sweep-%d\047, \047n_gpus_per_node\047: 8}}\n", NR;
        else if (k == 5) printf "(WorkerDict pid=231421) WARNING 03-14 14:33:45 [gpu_model_runner.py:2011] CUDA out of memory during cuda graph capture for batch size %d; skipping this size.\n", NR % 512;
        else if (k == 6) printf "/usr/local/lib/python3.10/dist-packages/accelerate/utils/memory.py:150: UserWarning: Caught CUDA out of memory; reducing batch size to %d and retrying\n", NR % 64;
        else if (k == 7) printf "{\"event\": \"attempt_finished\", \"attempt\": %d, \"class\": \"gpu_oom\", \"evidence\": \"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.68 GiB\"}\n", NR;
        else if (k == 8) printf "  --oom-retries N       how many times to retry a step after torch.OutOfMemoryError: CUDA out of memory (default: %d)\n", NR % 4;
        else if (k == 9) printf "- `No available memory for the cache blocks` at step %d: raise `gpu_memory_utilization`.\n", NR;
        else printf "  on_host_oom: \047slurmstepd: error: Detected 1 oom_kill event in StepId=%d.0\047\n", NR;
    }'
}

gen_log() { # $1 = path, $2 = block generator
    local log=$1 gen=$2
    if [[ -s $log && $(stat -c %s "$log") -ge $((SIZE_MB * 1024 * 1024 * 9 / 10)) ]]; then
        return
    fi
    echo "generating ~${SIZE_MB} MB $(basename "$log") in $DIR ..." >&2
    {
        cat <<'EOF'
+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=1024 actor_rollout_ref.rollout.gpu_memory_utilization=0.6 trainer.experiment_name=qwen7b-grpo-oom-sweep
(TaskRunner pid=2841) {'actor_rollout_ref': {'actor': {'checkpoint': {'contents': ['model', 'optimizer', 'extra']},
(TaskRunner pid=2841)                                  'fsdp_config': {'optimizer_offload': False, 'param_offload': False},
(TaskRunner pid=2841)  'trainer': {'experiment_name': 'qwen7b-grpo-CUDA out of memory-sweep', 'n_gpus_per_node': 8}}
[2025-03-29 18:18:34] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', mem_fraction_static=0.717, max_running_requests=None, disable_cuda_graph=False)
EOF
        # Build one ~4 MiB block set and repeat it (cat is fast); vary blocks a little.
        for b in 0 1 2 3; do "$gen" "$b"; done >"$DIR/block"
        block_size=$(stat -c %s "$DIR/block")
        reps=$(( (SIZE_MB * 1024 * 1024) / block_size ))
        for ((k = 0; k < reps; k++)); do cat "$DIR/block"; done
        rm -f "$DIR/block"
        cat <<'EOF'
(WorkerDict pid=231424) Traceback (most recent call last):
(WorkerDict pid=231424)   File "/usr/local/lib/python3.10/dist-packages/verl/workers/fsdp_workers.py", line 712, in update_actor
(WorkerDict pid=231424)     metrics = self.actor.update_policy(data=data)
(WorkerDict pid=231424)   File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 289, in backward
(WorkerDict pid=231424)     _engine_run_backward(
(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.66 GiB. GPU 3 has a total capacity of 79.14 GiB of which 4.97 GiB is free. Process 231424 has 74.16 GiB memory in use. Of the allocated memory 70.77 GiB is allocated by PyTorch, and 2.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
(TaskRunner pid=2841) ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() (pid=231424, ip=10.130.71.7, actor_id=b2ba64f62469495ea505301701000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7b8aac2e25c0>)
(WorkerDict pid=231421) [rank1]:[E314 14:43:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.
Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=1024', 'actor_rollout_ref.rollout.gpu_memory_utilization=0.6']
EOF
    } >"$log"
}

LOGS=${LOGS:-realistic adversarial}
for kind in $LOGS; do
    case $kind in
    realistic) gen_log "$DIR/realistic.log" gen_block ;;
    adversarial) gen_log "$DIR/adversarial.log" gen_adversarial_block ;;
    *) echo "error: unknown log kind '$kind'" >&2; exit 1 ;;
    esac
done
[[ -z ${GEN_ONLY:-} ]] || exit 0

if ! "$ORCH" classify --dump-patterns >"$PATTERNS" 2>/dev/null || [[ ! -s $PATTERNS ]]; then
    echo "error: '$ORCH classify --dump-patterns' did not print patterns (CLI flag not wired yet?)" >&2
    exit 1
fi
# The literal needles of the signature table (what orch's prefilter searches for).
python3 - "$ROOT/crates/orch-classify/src/rules.rs" >"$LITERALS" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
seen = []
# Needle arrays are the only `&["..", ..]` string-array literals in the table.
for arr in re.findall(r'&\[\s*("(?:[^"\\]|\\.)*"(?:\s*,\s*"(?:[^"\\]|\\.)*")*)\s*,?\s*\]', src):
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', arr):
        lit = lit.encode().decode("unicode_escape")
        if lit not in seen:
            seen.append(lit)
print("\n".join(seen))
PY

# ripgrep 13 rejects POSIX's `[]...]` bracket (a `]` first in a class): escape it.
sed 's/\[\]\[/[\\]\\[/g' "$PATTERNS" >"$DIR/patterns.rg"

HAVE_RG=$(command -v rg >/dev/null 2>&1 && echo 1 || true)
[[ -n $HAVE_RG ]] || echo "note: rg not found (apt-get install ripgrep); skipping its rows" >&2

time_cmd() { # prints mean seconds over $RUNS runs
    local total=0 t0 t1
    bash -c "$1" || true # warm-up
    for ((r = 0; r < RUNS; r++)); do
        t0=$(date +%s.%N)
        bash -c "$1" || true
        t1=$(date +%s.%N)
        total=$(awk -v a="$total" -v b="$t0" -v c="$t1" 'BEGIN { printf "%.6f", a + c - b }')
    done
    awk -v t="$total" -v n="$RUNS" 'BEGIN { printf "%.4f", t / n }'
}

bench_log() { # $1 = kind
    local kind=$1 log=$DIR/$1.log size names=() cmds=() name
    size=$(stat -c %s "$log")
    echo >&2
    echo "== $kind log: $log ($((size / 1024 / 1024)) MiB)" >&2
    echo "verdict: $("$ORCH" classify "$log" --json | tr -d '\n' | cut -c1-200)" >&2
    echo "grep -E matching lines: $(grep -E -c -f "$PATTERNS" "$log" || true)" >&2
    cat "$log" >/dev/null # warm the page cache
    # Output goes to real files: GNU grep treats a /dev/null stdout like -q and stops at
    # the first match (even with -c), which would make it look ~100x faster than it is.
    names+=(orch) cmds+=("$ORCH classify $log --json >$DIR/orch.out")
    names+=("grep -E -f") cmds+=("grep -E -c -f $PATTERNS $log >$DIR/grep.out")
    if [[ -n $HAVE_RG ]]; then
        names+=("rg -f") cmds+=("rg -c -f $DIR/patterns.rg $log >$DIR/rg.out")
        names+=("rg -F -f") cmds+=("rg -c -F -f $LITERALS $log >$DIR/rgF.out")
    fi
    names+=(cat) cmds+=("cat $log >/dev/null")
    declare -A MEAN=()
    if command -v hyperfine >/dev/null 2>&1; then
        local csv=$DIR/hyperfine-$kind.csv args=() k
        for k in "${!names[@]}"; do args+=(-n "${names[$k]}" "${cmds[$k]}"); done
        hyperfine --warmup 1 --runs "$RUNS" -i --style basic --export-csv "$csv" "${args[@]}" >&2
        # CSV columns: command,mean,stddev,... ; `command` is the -n name (no commas in ours).
        while IFS=, read -r name mean _; do MEAN[$name]=$mean; done < <(tail -n +2 "$csv")
    else
        for k in "${!names[@]}"; do MEAN[${names[$k]}]=$(time_cmd "${cmds[$k]}"); done
    fi
    printf '\n%s log, %d MiB, mean of %d runs\n' "$kind" $((size / 1024 / 1024)) "$RUNS"
    printf '| %-12s | %9s | %9s |\n|---|---:|---:|\n' tool seconds MB/s
    for name in "${names[@]}"; do
        awk -v n="$name" -v t="${MEAN[$name]}" -v b="$size" \
            'BEGIN { printf "| %-12s | %9.3f | %9.0f |\n", n, t, b / t / 1e6 }'
    done
}

for kind in $LOGS; do bench_log "$kind"; done
