#!/usr/bin/env bash
# On the GPU machine (issue 29, item 2): a sweep with MPS cells ended by `timeout` (SIGTERM, sent to
# the sweep and its process group, as `timeout` does) exits 143 and leaves no MPS daemon, no Ray
# process and no compute process on the GPUs; the same command again completes with one result per
# cell. Checked with ps and nvidia-smi.
# Usage (repo root, after `source .devbundle/install.sh`): bash jobs/check_sigterm.sh OUT_DIR [SECONDS]
set -uo pipefail
out=${1:-${OUT:-/tmp/out}}
secs=${2:-90}  # past Ray's start-up and the first cells' set-up: the signal lands while cells train
mkdir -p "$out/sigterm"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
# Long epochs (a time budget of 30 s each, and more samples than that takes: the budget ends them):
# the cells are still training when the signal comes.
cmd=(python3 -m raycolloc.sweep -m workload=resnet26_cifar10 batch_size=128 mode=mps degree=1,2,3,7
     epoch_samples=5000000 epoch_time_s=30 out_dir="$out/sigterm")
log() { echo "=== $* ($(date +%T))"; }
leftovers() {
  # By process name (comm), never by command line: pgrep -f also counts any shell whose command line
  # mentions them, this script's caller included.
  echo "mps processes: $(ps -eo comm= | grep -c '^nvidia-cuda-mps')"
  echo "ray processes: $(ps -eo comm= | grep -cE '^(raylet|gcs_server)$')"
  ps -eo pid,ppid,stat,comm | awk '$4 ~ /^(nvidia-cuda-mps|raylet|gcs_server|ray::)/' | grep . || echo "  (none)"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | sed 's/^/  gpu app: /'
  echo "  gpu apps: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
}
log "before"; leftovers
log "MPS sweep under timeout -s TERM $secs (SIGTERM while cells train)"
# --preserve-status: timeout exits with the sweep's own status (without it, 124 for any timed-out command).
timeout --preserve-status -s TERM "$secs" "${cmd[@]}" > "$out/sigterm/first.log" 2>&1
code=$?
echo "sweep exit code $code (143 expected: terminated; 0 if the sweep finished before the timeout)"
tail -n 12 "$out/sigterm/first.log"
grep -c "SIGTERM received" "$out/sigterm/first.log" | sed 's/^/native SIGTERM dumps (0 expected): /'
sleep 2; log "after SIGTERM"; leftovers
python3 -m raycolloc.doctor --out-dir "$out/sigterm"; echo "doctor exit code $? (0: nothing left)"
log "the same command again (without timeout): completes, the written cells reused"
"${cmd[@]}" > "$out/sigterm/rerun.log" 2>&1
echo "re-run exit code $?"
tail -n 6 "$out/sigterm/rerun.log"
echo "reused cells: $(grep -c 'reused; +rerun=true runs it again' "$out/sigterm/rerun.log")"
python3 - "$out/sigterm" <<'EOF'
import sys
from analysis.load import load_sweeps
from raycolloc.results.store import read_cell
cells = load_sweeps([sys.argv[1]]).cells
for cell_dir in cells["cell_dir"]:
    read_cell(cell_dir)  # each table reads back whole
print(f"cells: {len(cells)}, one per config: {cells['config_hash'].is_unique}, degrees: {sorted(cells['degree'])}, "
      f"statuses: {sorted(set(cells['status']))}")
EOF
log "after the re-run"; leftovers
