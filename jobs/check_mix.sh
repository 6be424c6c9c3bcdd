#!/usr/bin/env bash
# Issue 17's acceptance on one GPU: the study's recommender + ResNet mix in naive and MPS, each job
# training EPOCH_S seconds per epoch (default 12: at least 10 s each), the mix's solo cells (the sweep
# runs them itself), then the report (Table 2, Fig. 8) and the sweep listed by raycolloc.ls.
# Usage (repo root): bash jobs/check_mix.sh OUT_DIR
#        BACKEND=sim bash jobs/check_mix.sh OUT_DIR   (simulated GPUs, tiny_mixed: anywhere)
#        MIX=s_m_m EPOCH_S=none EPOCH_SAMPLES=25000 bash jobs/check_mix.sh OUT_DIR
#          (no time budget: each job trains EPOCH_SAMPLES an epoch, its solos' measured epochs run the 5 s
#          floor, and 25,000 is no whole number of batches: the sequential time's two fixes of 2026-12-05)
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
mkdir -p "$out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
if [ "${BACKEND:-gpu}" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"
  sweep=(-m "mix=${MIX:-tiny_mixed}" mode=naive,mps "epoch_time_s=${EPOCH_S:-2}" cluster=local)
else
  sweep=(-m "mix=${MIX:-dlrm_resnet152}" mode=naive,mps "epoch_time_s=${EPOCH_S:-12}")
fi
if [ "${EPOCH_S:-}" = none ]; then  # no time budget: a fixed number of samples an epoch
  sweep=("${sweep[@]/epoch_time_s=none/epoch_samples=${EPOCH_SAMPLES:-25000}}")
fi
log() { echo "=== $* ($(date +%T))"; }
log "environment"; git rev-parse HEAD 2> /dev/null || true
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader
log "sweep: python -m raycolloc.sweep ${sweep[*]}"
python3 -m raycolloc.sweep "${sweep[@]}" out_dir="$out/res" hydra.sweep.dir="$out/res/mix" > "$out/sweep.log" 2>&1
echo "exit $?"; sed -n '/^sweep /,$p' "$out/sweep.log"
log "report"
python3 -m analysis.report "$out/res/mix" --out "$out/report" 2>&1 | tail -n 5
python3 - "$out/report" <<'PY'
import sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.csv")):
    if "table2" in f.name or "mixed" in f.name:
        print(f"--- {f.name}"); print(f.read_text())
PY
log "raycolloc.ls"; python3 -m raycolloc.ls "$out/res"
log "leftovers (expect none)"
ps -eo pid,comm | grep -E "nvidia-cuda-mps|raylet" || echo "no MPS daemon or raylet left"
command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
