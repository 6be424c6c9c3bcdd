#!/usr/bin/env bash
# Issue 46's H200 acceptances of the headline's cost and of script jobs under MPS, in one device call:
#   1. the quick matrix before (measure.budget=1.0, the default until db553d2, with whole warm-ups:
#      measure.warmup=epoch, every run's before 4fd961f; three runs of each solo over whole floors:
#      measure.min_solo_repeats=3 measure.repeat_floor=1) and after (today's defaults): GPU time of each,
#      against the same cells measured once (each sweep's first runs), each configuration's interval (the
#      sweeps' own tables, in the logs), and each run's warm-up steps and measured seconds beside its rate,
#      each sweep's gain table (slowdowns included) and jobs/floor_whatif.py on both;
#   2. an unmodified PyTorch script (jobs/examples/plain_train.py, README's command) under MPS at
#      degrees 3 and 7, twice: how many of its jobs were seen as MPS clients.
# Usage (repo root, on a GPU machine): bash jobs/check_cost.sh OUT_DIR [cost|after|script|all]
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
what=${2:-all}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=$(command -v python || command -v python3)
read -ra extra <<< "${EXTRA:-}"  # e.g. EXTRA=cluster=local: the simulated backend, to try the script anywhere
quick=(-m degree=1,2,3,7 mode=naive,mps,mig workload=resnet26_cifar10 epoch_samples=25600)
log() { echo "=== $* ($(date +%T))"; }
if [ "$what" != script ]; then
  if [ "$what" != after ]; then  # after: today's defaults alone
    before=(measure.budget=1.0 measure.warmup=epoch measure.min_solo_repeats=3 measure.repeat_floor=1)
    log "quick matrix, before: ${before[*]}"
    $py -m raycolloc.sweep "${quick[@]}" "${before[@]}" "${extra[@]}" out_dir="$out/before" > "$out/before.log" 2>&1
    echo "exit $?"; grep -E "^(plan|time:|repeats auto)" "$out/before.log"
  fi
  log "quick matrix, after: defaults"
  $py -m raycolloc.sweep "${quick[@]}" "${extra[@]}" out_dir="$out/after" > "$out/after.log" 2>&1
  echo "exit $?"; grep -E "^(plan|time:|repeats auto)" "$out/after.log"
  $py - "$out" <<'PY'
import glob, sys
import pandas as pd
def drift(steps, secs):  # an epoch's later half of windows' rate over its earlier half's, less 1
    steps, secs, half = list(steps), [float(t) for t in secs], len(secs) // 2
    if half < 3 or any(t <= 0 for t in secs):
        return None
    return (sum(steps[-half:]) / sum(secs[-half:])) / (sum(steps[:half]) / sum(secs[:half])) - 1
out = sys.argv[1]
for name in ("before", "after"):
    files = glob.glob(f"{out}/{name}/multirun/*/*/*/cells.parquet")
    if not files:
        continue
    c = pd.concat([pd.read_parquet(f) for f in files])
    c = c[c["status"] == "ok"]
    once = c[c["repeat"] == 0]["total_s"].sum()
    total = c["total_s"].sum()
    print(f"{name}: {len(c)} cell runs, GPU time {total:.1f} s; the same cells once {once:.1f} s; ratio {total / once:.2f}x")
    wall = (c["finished_at"] - c["started_at"]).sum()
    wall_once = (c["finished_at"] - c["started_at"])[c["repeat"] == 0].sum()
    print(f"  with set-up (cell wall): {wall:.1f} s against {wall_once:.1f} s once; ratio {wall / wall_once:.2f}x")
    e = pd.concat([pd.read_parquet(f.replace("cells.parquet", "epochs.parquet")) for f in files])
    e = e.merge(c[["cell_id", "label", "repeat"]])
    warm = e[e["epoch"] == 1].groupby(["label", "repeat"])["steps"].max()
    rate = e[e["epoch"] == 2].groupby(["label", "repeat"])["samples_per_s"].sum()
    measured_s = e[e["epoch"] == 2].groupby(["label", "repeat"])["wall_s"].max()
    # Each run's measured epoch's drift (its later half's rate over its earlier half's: driver/floor.py) and floor.
    moved = e[e["epoch"] == 2].groupby(["label", "repeat"]).apply(
        lambda g: max((abs(d) for d in (drift(s, t) for s, t in zip(g["window_steps"], g["window_s"])) if d is not None), default=float("nan"))
    )
    j = pd.concat([pd.read_parquet(f.replace("cells.parquet", "jobs.parquet")) for f in files]).merge(c[["cell_id", "label", "repeat"]])
    floor = j.groupby(["label", "repeat"])["min_epoch_s"].max() if "min_epoch_s" in j else None
    for (label, repeat), steps in warm.items():
        key = (label, repeat)
        said = f", floor {floor[key]:g} s" if floor is not None and pd.notna(floor[key]) else ""
        print(f"  {label} r{repeat}: warm-up {steps} steps, measured {measured_s[key]:.1f} s at {rate[key]:,.0f} samples/s,"
              f" drift {100 * moved[key]:.1f}%{said}")
PY
  for name in before after; do  # each sweep's own table: intervals, gains, slowdowns (the sweep dirs do not come back)
    [ -f "$out/$name.log" ] && { echo "--- $name"; sed -n '/^throughput gain/,/cells have a result/p' "$out/$name.log"; }
  done
  # Repeat policies (runs, share of the floor) read off the before sweep's whole runs: intervals, GPU time.
  dirs=(); for name in before after; do [ -d "$out/$name" ] && dirs+=("$out/$name"); done
  $py jobs/floor_whatif.py "${dirs[@]}" --min-runs 3 --policy 3:1 --policy 3:0.3 --policy 4:0.3 --json "$out/floor_whatif.json"
fi
if [ "$what" = script ] || [ "$what" = all ]; then
  regex='workload.epoch_regex="^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+)"'
  for run in 1 2; do
    log "script under MPS x3 and x7, run $run"
    $py -m raycolloc.sweep -m workload=script degree=3,7 mode=mps \
      "workload.command=[$py,jobs/examples/plain_train.py,--epochs,3]" "$regex" \
      "${extra[@]}" out_dir="$out/script$run" > "$out/script$run.log" 2>&1
    echo "exit $?"
    $py - "$out/script$run" <<'PY'
import glob, sys
import pandas as pd
files = glob.glob(f"{sys.argv[1]}/multirun/*/*/*/jobs.parquet")
j = pd.concat([pd.read_parquet(f) for f in files])
for cell, g in j.groupby("cell_id"):
    seen = int(g["mps_client"].fillna(False).astype(bool).sum())
    errs = g["mps_check_error"].dropna().unique().tolist() if "mps_check_error" in g else []
    print(f"  {cell}: {seen} of {len(g)} jobs MPS clients {errs if errs else ''}")
PY
  done
fi
log "left behind"
ps -eo pid,comm,args | awk '$2 ~ /^nvidia-cuda-mps/' | cut -c1-120
command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
$py -m raycolloc.doctor | tail -3
