#!/usr/bin/env bash
# On the GPU machine (issue 30's acceptance), one part per argument, each logged under OUT:
#   before     the resnet26 quick matrix with the code before issue 30 (a `git archive` of it in .devbefore/),
#              its GPU time (cells' wall time summed): the "today" the default sweep's GPU time is held to
#   repro W    jobs/bench_reproducibility.py: the quick matrix of workload W run twice with the defaults
#   timm M     the same for timm model M (workload=timm workload.model=M workload.dataset=cifar10)
#   solo       jobs/check_solo_spread.py: naive x1 with repeats=5 against a raw process pinned to one core
#   side       jobs/bench_side_by_side.py: degree 1 and 2 cells alone, together, isolated
#   report     analysis.report over the repro sweeps (copied to OUT/report for a screenshot)
# Usage (repo root, after `source .devbundle/install.sh`):
#   bash jobs/check_measurement.sh OUT EPOCH_SAMPLES PART [PART ARG] ...
set -uo pipefail
out=$1; samples=$2; shift 2
mkdir -p "$out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
log() { echo "=== $* ($(date +%T))"; }
matrix=(-m degree=1,2,3,7 mode=naive,mps "epoch_samples=$samples")
gpu_time() {
  python3 - "$1" <<'PY'
import sys
from analysis.load import load_sweeps
c = load_sweeps([sys.argv[1]]).cells
print(f"{len(c)} cells, statuses {dict(c['status'].value_counts())}, GPU time "
      f"{(c['finished_at'] - c['started_at']).clip(lower=0).sum():.1f} s")
PY
}
# Every cell of the sweeps under $1, the columns that say how sure and why, as one CSV ($2) beside the log.
dump() {
  python3 - "$1" "$2" <<'PY'
import sys
from pathlib import Path
import pandas as pd
from analysis.load import load_sweeps
dirs = sorted({p.parent for p in Path(sys.argv[1]).rglob("multirun.yaml")})
if not dirs:
    sys.exit(0)
c = load_sweeps(dirs).cells
c["t_measure"] = c["measured_start_ts"] - c["measured_start_ts"].min()
c["measure_s"] = c["measured_end_ts"] - c["measured_start_ts"]
cols = ["sweep", "workload", "mode", "degree", "repeat", "status", "gpu_index", "agg_samples_per_s", "agg_rate_low",
        "agg_rate_high", "rate_cv", "unstable", "overlapping_cells", "isolated", "reserved_cpus", "cpu_wait_share_max",
        "core_mhz_min", "invol_switches_per_s_max", "sm_clock_min_mhz", "clock_events", "load_avg_mean",
        "foreign_gpu_procs", "t_measure", "measure_s", "setup_s", "barrier_s"]
c[[k for k in cols if k in c.columns]].sort_values(["sweep", "t_measure"]).to_csv(sys.argv[2], index=False)
print(f"wrote {sys.argv[2]} ({len(c)} cells)")
PY
}
nvidia-smi -L 2>/dev/null || true
while [ $# -gt 0 ]; do
  part=$1; shift
  case $part in
    before)
      log before
      (cd .devbefore && python3 -m raycolloc.sweep "${matrix[@]}" workload=resnet26_cifar10 out_dir="$out/before" \
        > "$out/before.log" 2>&1); echo "exit $?"; tail -n 14 "$out/before.log"
      gpu_time "$out/before"; dump "$out/before" "$out/before-cells.csv" ;;
    repro)
      w=$1; shift; log "repro $w"
      python3 jobs/bench_reproducibility.py --out "$out/repro-$w.json" --work "$out/repro-$w" -- \
        "${matrix[@]}" workload="$w" 2>&1 | tail -n 40
      dump "$out/repro-$w" "$out/repro-$w-cells.csv" ;;
    timm)
      m=$1; shift; log "repro timm $m"
      python3 jobs/bench_reproducibility.py --out "$out/repro-$m.json" --work "$out/repro-$m" -- \
        "${matrix[@]}" workload=timm workload.model="$m" workload.dataset=cifar10 2>&1 | tail -n 40
      dump "$out/repro-$m" "$out/repro-$m-cells.csv" ;;
    solo)
      log solo
      python3 jobs/check_solo_spread.py --out "$out/solo.json" --work "$out/solo" --epoch-samples "$samples" 2>&1 | tail -n 12
      dump "$out/solo" "$out/solo-cells.csv" ;;
    side)
      log side
      python3 jobs/bench_side_by_side.py --out "$out/side.json" --work "$out/side" -- \
        -m degree=1,2 mode=naive,mps workload=resnet26_cifar10 "epoch_samples=$samples" 2>&1 | tail -n 20
      dump "$out/side" "$out/side-cells.csv" ;;
    report)
      log report
      dirs=$(find "$out" -path '*/multirun/*' -name multirun.yaml -printf '%h\n' | sort -u | head -n 2)
      python3 -m analysis.report $dirs --out "$out/report" > "$out/report.log" 2>&1; echo "exit $?"
      tail -n 30 "$out/report.log" ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
pgrep -fa nvidia-cuda-mps-control || echo "no MPS daemon left"
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader 2>/dev/null | head
