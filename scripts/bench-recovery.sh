#!/usr/bin/env bash
# Recovery quality on the simulated trainer: every built-in experiment × every built-in
# profile, from the experiment's configuration as written, on the local backend. Prints one
# row per pair and a summary: did it succeed, how many memory failures before the fit (each
# one a queue wait on a cluster), whether the final configuration trains something else, and
# the predicted throughput it keeps against the best fitting configuration the ladder allows
# (`orch estimate --json`'s `best`: what preflight would submit, by the estimate with the
# architecture known where it can be; both figures from the planner's throughput model).
#
# Each pair runs under each of the simulated trainer's truths (docs/SIMULATOR.md, "Truth"):
# `exact` (the job needs what orch's estimate says: the planner cannot be caught out, so
# recovery is true by construction) and `calibrated` (the job needs the estimate times an error
# drawn per configuration from the calibration set's residuals, seeded: what an estimation
# error costs). Two columns measure against the TRUE peak (`orch estimate --sim-truth`'s
# `true_best`): `true` against what preflight would submit if the truth were its estimate (the
# plan as written when it truly fits, else the best of the steps answering its true failure,
# widened to every memory step only when those do not fit: the best fitting throughput
# recovery is measured against), and `ladder` against the best of the whole ladder, steps
# that answer no failure of the plan included (raising vLLM's memory above what was written),
# which a first submission's preflight never takes for a plan that fits. The summary also
# gives the pairs whose architecture orch knows apart (recovery's goal is stated for them: a
# size-only experiment has no preflight).
#
#   scripts/bench-recovery.sh [MAX_ATTEMPTS]        (default 8)
#
# The three settings the planner is measured in:
#   scripts/bench-recovery.sh                                   # preflight on (the default)
#   EXTRA=--preflight=off scripts/bench-recovery.sh             # from the first failure
#   ORCH_ARCHITECTURE=unknown scripts/bench-recovery.sh         # architecture unknown
#
# Env: ORCH (binary; default target/release/orch, built unless NO_BUILD=1),
#      EXPERIMENTS / PROFILES (space-separated; default: all built-in ones),
#      ORCH_SIM_STEP_SECONDS (default 0.05: the simulator's step time; the table does not
#      depend on it), EXTRA (more arguments for `orch submit`, e.g. "--preflight=off"),
#      TRUTHS (default "exact calibrated"), ORCH_SIM_TRUTH_SEED (the calibrated draw; default 0),
#      SEEDS (several calibrated draws, e.g. "0 1 2": each runs as its own truth,
#      `calibrated:sN`, and the summary adds them up; the draws are per configuration, so one
#      seed's figures move whenever the calibration set's residuals do).
# The demo's simulated preemption (experiments/diamonds.yaml) is switched off: only memory
# failures are counted.
set -euo pipefail

MAX=${1:-8}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
# The work happens in its own directory: a relative ORCH is taken from where the script started.
[[ $ORCH == /* || $ORCH != */* ]] || ORCH=$PWD/$ORCH
if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p orch)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }
export ORCH_SIM_STEP_SECONDS=${ORCH_SIM_STEP_SECONDS:-0.05}
TRUTHS=${TRUTHS:-exact calibrated}
SEED=${ORCH_SIM_TRUTH_SEED:-0}
SEEDS=${SEEDS:-$SEED}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-recovery.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# One member per sweep (the members differ in the seed only).
EXPERIMENTS=${EXPERIMENTS:-$("$ORCH" experiments --json | python3 -c '
import json, re, sys
for e in json.load(sys.stdin):
    if isinstance(e, dict):
        members = e.get("members") or []
        print(members[0] if members else e["name"])
    else:
        m = re.match(r"\S+ \(([^,)]+)", e)
        print(m.group(1) if m else e.split()[0])' | tr '\n' ' ')}
PROFILES=${PROFILES:-$("$ORCH" profiles --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    print(p["name"] if isinstance(p, dict) else p)' | tr '\n' ' ')}

printf '%-16s %-10s %-13s %-9s %6s %8s %6s %6s %6s  %s\n' experiment profile truth result failed attempts kept true ladder "semantic changes (final steps)"
rows=$WORK/rows.tsv
: >"$rows"
# Each (truth, seed) to run, as `truth seed label`: the exact truth draws nothing.
runs_of() {
    local truth seed
    for truth in $TRUTHS; do
        if [[ $truth == calibrated ]]; then
            # shellcheck disable=SC2086
            set -- $SEEDS
            for seed in "$@"; do
                if [[ $# -gt 1 ]]; then echo "$truth $seed $truth:s$seed"; else echo "$truth $seed $truth"; fi
            done
        else
            echo "$truth $SEED $truth"
        fi
    done
}
while read -r truth seed label; do
for exp in $EXPERIMENTS; do
    for prof in $PROFILES; do
        runs="$WORK/runs-$label-$exp-$prof"
        # shellcheck disable=SC2086
        ORCH_RUNS_DIR=$runs "$ORCH" submit "$exp" --profile "$prof" --backend local \
            --max-attempts "$MAX" --set env.ORCH_SIM_PREEMPT_AT_STEP=0 \
            --set env.ORCH_SIM_TRUTH="$truth" --set env.ORCH_SIM_TRUTH_SEED="$seed" ${EXTRA:-} \
            >/dev/null 2>"$WORK/err" || true
        # The run is the directory with a ledger (evidence.jsonl sits beside it).
        run=$(cd "$runs" 2>/dev/null && for d in */events.jsonl; do [[ -e $d ]] && echo "${d%/events.jsonl}"; done | head -n 1)
        if [[ -z $run ]]; then
            printf '%-16s %-10s %-13s %-9s %6s %8s %6s %6s %6s  %s\n' "$exp" "$prof" "$label" refused - - - - - "$(head -n 1 "$WORK/err")"
            printf '%s\t%s\t%s\trefused\t-\t-\t-\t\t\t\t\t\n' "$exp" "$prof" "$label" >>"$rows"
            continue
        fi
        # The best fitting configuration's predicted throughput, with the architecture known:
        # by the estimate (preflight's `best`) and by the truth (`true_best`).
        env -u ORCH_ARCHITECTURE "$ORCH" estimate "$exp" --profile "$prof" --json \
            --sim-truth "$truth" --sim-truth-seed "$seed" \
            >"$WORK/best.json" 2>/dev/null || echo '{}' >"$WORK/best.json"
        last=$(ls "$runs/$run/attempts" 2>/dev/null | sort -n | tail -n 1)
        if [[ -n $last ]] && env -u ORCH_ARCHITECTURE "$ORCH" estimate "$exp" --profile "$prof" \
            --plan-file "$runs/$run/attempts/$last/plan.yaml" --json >"$WORK/final.json" 2>/dev/null; then :
        else echo '{}' >"$WORK/final.json"; fi
        ORCH_RUNS_DIR=$runs "$ORCH" history "$run" --json | python3 -c '
import json, sys
exp, prof, truth = sys.argv[1], sys.argv[2], sys.argv[6]
h = json.load(sys.stdin)
atts = h["attempts"]
ok = h["state"] == "succeeded"
failed = sum(1 for a in atts if a["outcome"] in ("gpu_oom", "kv_cache", "host_oom"))
last = atts[-1] if atts else {}
sem = [a["step"] for a in atts if a.get("changes_semantics")]
steps = ",".join(last.get("steps", [])) or "-"
desc = ("yes: " + ",".join(sem) if sem else "no") + " (" + steps + ")"
best_est = json.load(open(sys.argv[4]))
final_est = json.load(open(sys.argv[5]))
pre = best_est.get("best") or best_est.get("preflight")
if pre:
    best = pre["throughput"]
elif best_est.get("verdict") in ("fits", "tight"):
    best = best_est["throughput"]
else:
    best = None
tb = best_est.get("true_best") or {}
policy_best = (tb.get("policy") or {}).get("throughput")
ladder_best = (tb.get("best") or {}).get("throughput")
known = "yes" if (best_est.get("architecture") or {}).get("known") else "no"
final = final_est.get("throughput")
ratio = lambda b: final / b if ok and b and final else None
kept, kept_true, kept_ladder = ratio(best), ratio(policy_best), ratio(ladder_best)
pct = lambda k: "%5.0f%%" % (100 * k) if k is not None else "     -"
print("%-16s %-10s %-13s %-9s %6d %8d %s %s %s  %s" % (exp, prof, truth, "ok" if ok else h["state"], failed, len(atts), pct(kept), pct(kept_true), pct(kept_ladder), desc))
blank = lambda k: "" if k is None else k
with open(sys.argv[3], "a") as f:
    f.write("%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n" % (exp, prof, truth, "ok" if ok else h["state"], failed, len(atts), "yes" if sem else "no", blank(kept), blank(kept_true), final if ok and final else "", blank(kept_ladder), known))
' "$exp" "$prof" "$rows" "$WORK/best.json" "$WORK/final.json" "$label"
    done
done
done < <(runs_of)
python3 - "$rows" "$SEEDS" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
labels = list(dict.fromkeys(r[2] for r in rows))
seeds = [l for l in labels if l.startswith("calibrated:")]
# Each truth (each calibrated seed apart), then the seeds together.
groups = [(l, [r for r in rows if r[2] == l]) for l in labels]
if len(seeds) > 1:
    groups.append(("calibrated, seeds " + " ".join(l.split(":s")[1] for l in seeds),
                   [r for r in rows if r[2] in seeds]))
for truth, mine in groups:
    ran = [r for r in mine if r[3] != "refused"]
    ok = [r for r in ran if r[3] == "ok"]
    fails = [int(r[4]) for r in ok]
    print()
    print(f"truth {truth}" + (f" (seed {sys.argv[2]})" if truth == "calibrated" else "") +
          f": pairs: {len(mine)}; succeeded: {len(ok)}; did not fit: {len(ran) - len(ok)}; refused: {len(mine) - len(ran)}")
    if fails:
        print(f"  failed attempts before the fit (succeeded pairs): median {statistics.median(fails)}, "
              f"mean {statistics.mean(fails):.2f}, max {max(fails)}; zero failures: {sum(1 for f in fails if f == 0)}")
    print(f"  pairs whose final configuration changes training semantics: {sum(1 for r in ok if r[6] == 'yes')}")
    for col, what in ((7, "the estimate's best (preflight's choice)"),
                      (8, "the best fitting by the TRUE peak (what preflight would choose if it knew the true peaks)"),
                      (10, "the best fitting by the TRUE peak (whole ladder, raising what was written included)")):
        for scope, these in (("", ok), (", architecture known", [r for r in ok if len(r) > 11 and r[11] == "yes"])):
            kept = [float(r[col]) for r in these if len(r) > col and r[col] not in ("", "-")]
            if kept:
                print(f"  throughput kept vs {what}{scope}: median {100 * statistics.median(kept):.0f} %, "
                      f"min {100 * min(kept):.0f} %; pairs at ≥ 95 %: {sum(1 for k in kept if k >= 0.95)} of {len(kept)}")
    known = [int(r[4]) for r in ok if len(r) > 11 and r[11] == "yes"]
    if known:
        print(f"  failed attempts before the fit, architecture known: median {statistics.median(known)}, "
              f"mean {statistics.mean(known):.2f}, max {max(known)} over {len(known)} pairs")
    # What the estimate's error alone costs: the same pair's final throughput with an exact truth.
    exact = {(r[0], r[1]): float(r[9]) for r in rows if r[2] == "exact" and len(r) > 9 and r[9]}
    vs = [float(r[9]) / exact[(r[0], r[1])] for r in ok
          if truth != "exact" and len(r) > 9 and r[9] and exact.get((r[0], r[1]))]
    if vs:
        print(f"  throughput vs the same pair under the exact truth: median {100 * statistics.median(vs):.0f} %, "
              f"min {100 * min(vs):.0f} %; pairs at ≥ 95 %: {sum(1 for k in vs if k >= 0.95)} of {len(vs)}")
PY
