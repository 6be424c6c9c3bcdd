#!/usr/bin/env bash
# On the GPU machine (device tool): the foundation cell, an MPS cell, the MIG refusal, GPU tests.
# Usage (from the repo root, after `source .devbundle/install.sh`): bash jobs/device_check.sh OUT_DIR
set -uo pipefail
out=${1:-${OUT:-/tmp/out}}
mkdir -p "$out/res"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
log() { echo "=== $* ($(date +%T))"; }
log "gpus"; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,mig.mode.current,compute_mode --format=csv
log "naive cell (foundation acceptance)"
python3 -m raycolloc.sweep workload=resnet26_cifar10 degree=3 epoch_samples=51200 batch_size=128 out_dir="$out/res"
log "mps cell"
python3 -m raycolloc.sweep workload=resnet26_cifar10 degree=3 epoch_samples=51200 batch_size=128 mode=mps out_dir="$out/res"
log "mig cell on a GPU with MIG disabled (must refuse before any job starts)"
nvidia-smi --query-gpu=mig.mode.current --format=csv
python3 -m raycolloc.sweep workload=resnet26_cifar10 degree=2 mode=mig out_dir="$out/res"; echo "exit code $?"
nvidia-smi --query-gpu=mig.mode.current --format=csv
log "gpu tests"
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
log "leftovers (expect none)"
ps -eo pid,cmd | grep -E "[n]vidia-cuda-mps|[r]aylet|[T]rainer" || echo "no MPS daemon, raylet or trainer left"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
(cd "$out" && tar czf results.tgz res && rm -rf res)
