#!/usr/bin/env bash
# Issue 15's acceptance: the headline command on a GPU without MIG, then a driver SIGKILLed during
# an MPS cell and the same command again.
#   1. the headline sweep runs its naive and MPS cells and records the mig cells as skipped (exit 1:
#      those cells have no result; its last lines say why);
#   2. into a fresh output, the same sweep's driver is SIGKILLed while an MPS cell trains: ps and
#      nvidia-smi show what is left (the MPS daemon), and `python -m raycolloc.doctor` names it;
#   3. the same command again: the steward stops the daemon it finds, every naive/MPS cell has exactly
#      one result, and nothing is left (ps, nvidia-smi, the doctor).
# Usage (repo root): bash jobs/check_headline.sh OUT_DIR
#        BACKEND=sim bash jobs/check_headline.sh OUT_DIR   (simulated GPUs with MIG off, tiny workload: anywhere)
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
backend=${BACKEND:-gpu}
mkdir -p "$out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
pipe=/tmp/rc-headline-$$  # mode.pipe_root of this check alone
if [ "$backend" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"  # simulated GPUs of this check alone
  sweep=(-m degree=1,2,3,7 mode=naive,mps,mig workload=tiny_cnn epoch_samples=4096 cluster=local
         cluster.sim_mig_mode=disabled)
else
  sweep=(-m degree=1,2,3,7 mode=naive,mps,mig workload=resnet26_cifar10 epoch_samples=25600)
fi
sweep+=("mode.pipe_root=$pipe")
log() { echo "=== $* ($(date +%T))"; }
daemons() {  # MPS control daemons and servers: NVIDIA's by process name, the simulated ones by module
  ps -eo pid,ppid,comm,args | awk '$3 ~ /^nvidia-cuda-mps/ || /[r]aycolloc.node.gpu.sim_mps|[n]vidia-cuda-mps-server/' \
    | cut -c1-160
}
leftovers() {
  echo "MPS processes:"; daemons | sed 's/^/  /'; [ -n "$(daemons)" ] || echo "  (none)"
  echo "Ray processes of this user: $(pgrep -c -u "$(id -u)" raylet || true) raylet(s)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,name,mig.mode.current --format=csv,noheader | sed 's/^/  gpu: /'
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | sed 's/^/  gpu app: /'
    echo "  gpu apps: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
  fi
  python3 -m raycolloc.doctor --pipe-root "$pipe" | sed 's/^/  /'
}
results() {  # every cell's newest row; results (ok, partial, oom, unfit): one per config, read back whole
  python3 - "$1" <<'EOF'
import sys
from analysis.load import load_sweeps
from raycolloc.results.index import RESULT_STATUSES
from raycolloc.results.store import read_cell
cells = load_sweeps([sys.argv[1]]).cells
print(cells.sort_values(["mode", "degree"])[["label", "status", "config_hash", "agg_samples_per_s"]].to_string(index=False))
every = load_sweeps([sys.argv[1]], all_results=True).cells  # every row of every run, references followed
results = every[every["status"].isin(RESULT_STATUSES)]
for d in results["cell_dir"]:
    read_cell(d)
print(f"{len(cells)} cells: {results['config_hash'].nunique()} with a result, "
      f"{int(results['config_hash'].duplicated().sum())} results twice; rows without a result (one per run that "
      f"tried): {len(every) - len(results)}; status {cells['status'].value_counts().to_dict()}")
EOF
}

log "1. headline: python -m raycolloc.sweep ${sweep[*]}"
leftovers
python3 -m raycolloc.sweep "${sweep[@]}" out_dir="$out/headline" 2>&1 | tee "$out/headline.log" | tail -n 20
echo "exit code ${PIPESTATUS[0]} (1: the mig cells have no result; see the lines above)"
results "$out/headline"

log "2. the same sweep into $out/killed; its driver gets SIGKILL during an MPS cell"
python3 -m raycolloc.sweep "${sweep[@]}" out_dir="$out/killed" > "$out/killed-1.log" 2>&1 &
pid=$!
# Until an MPS cell of this sweep trains (the progress lines) under its daemon (its record under our
# pipe root; other daemons on the machine are not ours). The daemon stops before each naive cell.
mps_training() {
  [ "$(grep -E '^\[sweep\] cell ' "$out/killed-1.log" | tail -n 1 | grep -cE -- '-mps-x[0-9]+: (warm-up|measuring)')" = 1 ] \
    && compgen -G "$pipe/GPU-*/daemon.json" > /dev/null
}
for _ in $(seq 1 600); do  # at most 5 minutes, and not past the sweep's own end
  mps_training && break
  kill -0 "$pid" 2> /dev/null || { echo "the sweep ended before an MPS cell trained"; break; }
  sleep 0.5
done
sleep 1
grep -E "^\[sweep\] cell " "$out/killed-1.log" | tail -n 2
log "SIGKILL to the driver (pid $pid) alone"; kill -KILL "$pid"; wait "$pid"; echo "driver exit code $?"
sleep 10  # Ray's processes follow their driver
log "left behind"
leftovers
[ -n "$(daemons)" ] || echo "(no MPS daemon was left: the kill landed between MPS cells; run again)"

log "3. the same command again"
python3 -m raycolloc.sweep "${sweep[@]}" out_dir="$out/killed" 2>&1 | tee "$out/killed-2.log" | tail -n 12
echo "exit code ${PIPESTATUS[0]}"
grep -E "leftover|stale|stopping it" "$out/killed-2.log" | head -n 5
results "$out/killed"
sleep 2
log "after"
leftovers
rm -rf "$pipe"
