#!/usr/bin/env bash
# On the GPU machine: no MPS daemon may outlive a cell — a normal one, a failed one, or a sweep
# stopped with Ctrl-C (SIGINT) in the middle of an MPS cell. Checked with ps and nvidia-smi.
# Usage (repo root, after `source .devbundle/install.sh`): bash jobs/check_mps_cleanup.sh OUT_DIR
set -uo pipefail
out=${1:-${OUT:-/tmp/out}}
mkdir -p "$out/cleanup"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
common=(workload=resnet26_cifar10 batch_size=128 epoch_samples=25600 mode=mps out_dir="$out/cleanup" +rerun=true)
log() { echo "=== $* ($(date +%T))"; }
leftovers() {
  local n
  # By process name (comm), never by command line: pgrep -f also counts any shell whose command
  # line mentions the daemon, this script's caller included.
  echo "mps processes: $(ps -eo comm= | grep -c '^nvidia-cuda-mps')"
  ps -eo pid,ppid,comm | awk '$3 ~ /^nvidia-cuda-mps/' | grep . || echo "  (none)"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | sed 's/^/  gpu app: /'
  echo "  gpu apps: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
}
log "before"; leftovers
log "normal MPS cell"
python3 -m raycolloc.sweep "${common[@]}" degree=2; echo "exit code $?"
leftovers
log "failed MPS cell (job 1 dies mid-epoch: trainer.fault=exit)"
python3 -m raycolloc.sweep "${common[@]}" degree=3 trainer.fault=exit trainer.fault_job=1 trainer.fault_epoch=2; echo "exit code $?"
leftovers
log "MPS sweep interrupted with SIGINT while a cell trains"
# Job control on: the sweep gets its own process group and, unlike a plain `cmd &` in a script,
# does not ignore SIGINT. The signal goes to the whole group, as a terminal's Ctrl-C does.
set -m
python3 -m raycolloc.sweep -m "${common[@]}" degree=3,7 epoch_samples=256000 > "$out/cleanup/sigint.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do  # wait until a trainer is running on the GPU
  [ "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)" -ge 2 ] && break; sleep 1
done
sleep 5; log "sending SIGINT to the sweep (pid $pid)"; nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader
kill -INT -- -"$pid"; wait "$pid"; echo "sweep exit code $?"
set +m
tail -n 15 "$out/cleanup/sigint.log"
sleep 2; log "after SIGINT"; leftovers
