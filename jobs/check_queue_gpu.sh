#!/usr/bin/env bash
# Issue 33's acceptance on a GPU machine, one call per step (each within the device's 10-minute limit):
#   bash jobs/check_queue_gpu.sh OUT profile            # the trace, and each workload's profile (reused later)
#   bash jobs/check_queue_gpu.sh OUT exclusive|carma|raycolloc   # one policy's replay on every GPU
#   bash jobs/check_queue_gpu.sh OUT table              # the policies side by side (analysis.queue)
# OUT persists between calls only on one machine: carry OUT's tarball (OUT.tgz, written at each end)
# into the next call, which unpacks it first. Settings (environment): JOBS (60), SEED (1), JOB_S (18:
# median seconds alone, catalogue rates), GAP_S (2: mean gap between arrivals), LIMIT_S (560), TRACE (trace:
# the trace's name; another name writes another trace beside the first, its runs reusing the profiles).
# BACKEND=sim runs the same steps on simulated GPUs (queue.stand_in=tiny_cnn, tiny lengths): plumbing only.
set -uo pipefail
out=$(realpath -m "${1:?OUT}"); step=${2:?step}
trace=${TRACE:-trace}
mkdir -p "$out"; [ -f "$out.tgz" ] && [ ! -d "$out/res" ] && tar -xzf "$out.tgz" -C "$(dirname "$out")"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
words=(queue.runner=ray "out_dir=$out/res")
if [ "${BACKEND:-gpu}" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"
  words+=(cluster=local cluster.num_gpus=2 queue.stand_in=tiny_cnn epoch_samples=256)
fi
log() { echo "=== $* ($(date +%T))"; }
log "$step"; command -v nvidia-smi > /dev/null && nvidia-smi -L
case "$step" in
  profile)
    [ -f "$out/$trace.csv" ] || python3 -m raycolloc.queue trace --jobs "${JOBS:-60}" --seed "${SEED:-1}" \
      --out "$out/$trace.csv" "queue.trace_job_s=${JOB_S:-18}" "queue.trace_gap_s=${GAP_S:-2}"
    if [ "${BACKEND:-gpu}" = sim ]; then  # tiny lengths: the stand-in trains on a CPU
      python3 - "$out/$trace.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    r["samples"] = "256"
w = csv.DictWriter(open(sys.argv[1], "w", newline=""), fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
PY
    fi
    # The profiles alone: a replay of the trace's first job, which profiles every workload of the trace.
    head -2 "$out/$trace.csv" > "$out/$trace-first.csv"
    timeout "${LIMIT_S:-560}" python3 -m raycolloc.queue replay "$out/$trace-first.csv" queue.policy=exclusive "${words[@]}"
    echo "exit $?"
    ;;
  exclusive | carma | raycolloc)
    [ -f "$out/$trace.csv" ] || { echo "no $out/$trace.csv: run the profile step first" >&2; exit 2; }
    timeout "${LIMIT_S:-560}" python3 -m raycolloc.queue replay "$out/$trace.csv" "queue.policy=$step" "${words[@]}" \
      > "$out/$trace-$step.log" 2>&1
    echo "exit $?"; grep -v "released Release" "$out/$trace-$step.log" | tail -n 8
    ;;
  table)
    python3 -m analysis.queue "$out/res/queue" --out "$out/analysis" 2>&1 | tail -n 20
    ;;
  *) echo "unknown step $step: choose profile, exclusive, carma, raycolloc or table" >&2; exit 2 ;;
esac
log "leftovers (expect none)"
pgrep -fa "nvidia-cuda-mps|raylet" | head -3 || echo "no MPS daemon or raylet left"
(cd "$(dirname "$out")" && tar -czf "$out.tgz" "$(basename "$out")")
