#!/usr/bin/env bash
# Issue 32's acceptance on a GPU machine, one call per step (each within the device's 10-minute limit):
#   bash jobs/check_advise_gpu.sh OUT brute      # ground truth: naive and MPS at every degree, every model
#                                                # (resumable: a step cut by LIMIT_S goes on in the next call)
#   bash jobs/check_advise_gpu.sh OUT advise     # advise + confirm each model, fitted on the others' brute force
#   bash jobs/check_advise_gpu.sh OUT validate   # leave-one-out --validate over every brute-force sweep
#   bash jobs/check_advise_gpu.sh OUT table      # per model: pick, measured, predicted, regret, GPU time
# OUT persists between calls only on one machine: carry OUT's tarball (OUT.tgz, written at each end) into
# the next call, which unpacks it first. Settings (environment): MODELS (timm models on CIFAR-10 beside
# resnet26_cifar10), DEGREES (1,2,3,7,14,28,48; on a GPU those above the node's cores are left out: 48
# needs the 64-core 4-GPU kind), EPOCH_S (5: every epoch's length), ADVISE (extra advisor words; the
# nineteenth and twenty-third sessions' runs: "probe_degrees=none confirm_k=2"; since then the default
# probes are MPS at the largest ranked degree alone where other models cover the rest: "confirm_k=2"),
# LIMIT_S (560).
# BACKEND=sim runs the same steps on simulated GPUs (tiny_cnn, tiny_dlrm; degrees 1,2,3): plumbing only.
set -uo pipefail
out=$(realpath -m "${1:?OUT}"); step=${2:?step}
mkdir -p "$out"; [ -f "$out.tgz" ] && [ ! -d "$out/res" ] && tar -xzf "$out.tgz" -C "$(dirname "$out")"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
limit=${LIMIT_S:-560}
if [ "${BACKEND:-gpu}" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"
  common=(cluster=local cluster.num_gpus=2 "epoch_time_s=${EPOCH_S:-1}")
  degrees=${DEGREES:-1,2,3}
  named=(tiny_cnn tiny_dlrm); models=()
else
  common=("epoch_time_s=${EPOCH_S:-5}")
  degrees=${DEGREES:-1,2,3,7,14,28,48}
  named=(resnet26_cifar10); read -r -a models <<< "${MODELS:-convnext_atto mobilenetv3_large_100 resnet18}"
fi
# On a GPU raycolloc gives every training process a core: a degree above the node's cores is refused
# before anything runs (exit 2). Leave those out here, and say so.
if [ "${BACKEND:-gpu}" != sim ]; then
  cores=$(nproc); kept=()
  for d in ${degrees//,/ }; do
    if [ "$d" -le "$cores" ]; then kept+=("$d"); else echo "degree $d left out: this node has $cores cores"; fi
  done
  degrees=$(IFS=,; echo "${kept[*]}")
fi
# One entry per model: its advisor words and a short name.
entries=()
for w in "${named[@]}"; do entries+=("$w|workload=$w"); done
for m in "${models[@]}"; do entries+=("$m|workload=timm workload.model=$m workload.dataset=cifar10"); done
log() { echo "=== $* ($(date +%T))"; }
# GPU time (the cells' wall time summed, reused cells left out) of the sweeps or advice under $1.
gpu_time() {
  python3 - "$@" <<'PY'
import sys
from pathlib import Path
from analysis.load import load_sweeps
for root in sys.argv[1:]:
    dirs = sorted({p.parent for p in Path(root).rglob("cells.parquet")})
    if not dirs:
        print(f"{root}: no cells"); continue
    c = load_sweeps(dirs).cells.drop_duplicates("cell_id")
    s = (c["finished_at"] - c["started_at"]).clip(lower=0).sum()
    print(f"{root}: {len(c)} cells {dict(c['status'].value_counts())}, GPU time {s:.1f} s")
PY
}
log "$step"; command -v nvidia-smi > /dev/null && nvidia-smi -L
case "$step" in
  brute)
    start=$(date +%s)
    for e in "${entries[@]}"; do
      name=${e%%|*}; read -r -a words <<< "${e#*|}"
      left=$((limit - ($(date +%s) - start)))
      [ "$left" -lt 30 ] && { echo "$name: no time left in this call (run the step again)"; continue; }
      log "brute $name ($left s left)"
      timeout "$left" python3 -m raycolloc.sweep -m "${words[@]}" mode=naive,mps "degree=$degrees" "${common[@]}" \
        cluster.isolate_measurement=true "out_dir=$out/res/brute" "hydra.sweep.dir=$out/res/brute/$name" \
        >> "$out/brute-$name.log" 2>&1
      echo "exit $?"; sed -n '/^sweep /,$p' "$out/brute-$name.log" | tail -n 40
    done
    gpu_time "$out"/res/brute/*
    ;;
  advise)
    read -r -a extra <<< "${ADVISE:-}"
    for e in "${entries[@]}"; do
      name=${e%%|*}; read -r -a words <<< "${e#*|}"
      [ -f "$out/advice-$name.json" ] && { echo "$name: advised already"; continue; }
      log "advise $name"
      # Its own out_dir: nothing of the brute force is reused; the fit reads the other models' cells.
      timeout "$limit" python3 -m raycolloc.advise "${words[@]}" "${common[@]}" "degrees=$degrees" "${extra[@]}" \
        "out_dir=$out/res/adv-$name" --fit "$out/res/brute" --out "$out/advice-$name.json" > "$out/advise-$name.log" 2>&1
      echo "exit $?"; grep -v '^\[' "$out/advise-$name.log" | tail -n 40
      gpu_time "$out/res/adv-$name"
    done
    ;;
  validate)
    python3 -m raycolloc.advise --validate "$out"/res/brute/* --out "$out/validation.json" 2>&1 | grep -v 'analysis.load'
    echo "exit ${PIPESTATUS[0]}"
    ;;
  table)
    python3 jobs/advise_regret.py "$out" 2>&1
    ;;
  *) echo "unknown step $step: choose brute, advise, validate or table" >&2; exit 2 ;;
esac
log "leftovers (expect none)"
pgrep -fa "nvidia-cuda-mps|raylet" | head -3 || echo "no MPS daemon or raylet left"
(cd "$(dirname "$out")" && tar -czf "$out.tgz" "$(basename "$out")")
