#!/usr/bin/env bash
# On a multi-GPU machine (issue 29, item 8): a radT plan run as radT runs it (each group on the GPU its
# `Devices` names, one after another) against the same plan with +plan_fanout=true (groups at once on
# any free GPU), wall time of each, and a dry run showing each job's input shape (ImageNet64 rows at
# 3x64x64). Each run gets its own copy of the plan (a run writes Status back into its plan) and its own
# out_dir (nothing reused between them).
# Usage (repo root, after `source .devbundle/install.sh`):
#   bash jobs/check_plan_fanout.sh PLAN.csv OUT_DIR [OVERRIDES...]     e.g. epoch_samples=1280
set -uo pipefail
plan=$1; out=$2; shift 2
mkdir -p "$out/fanout-check"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
log() { echo "=== $* ($(date +%T))"; }
nvidia-smi -L 2>/dev/null || true
log "dry run: the input shape of each model"
python3 -m raycolloc.sweep +plan="$plan" +dry_run=true "$@" > "$out/fanout-check/dry.log" 2>&1
echo "dry run exit $?"; grep -E "^ +[0-9]+-" "$out/fanout-check/dry.log" | sed 's/^ *[0-9]*-//; s/, batch.*//' | sort | uniq -c
tail -n 1 "$out/fanout-check/dry.log"
for how in pinned fanout; do
  cp "$plan" "$out/fanout-check/$how.csv"
  extra=(); [ "$how" = fanout ] && extra=(+plan_fanout=true)
  log "$how"
  start=$(date +%s.%N)
  python3 -m raycolloc.sweep +plan="$out/fanout-check/$how.csv" "${extra[@]}" out_dir="$out/fanout-check/$how" "$@" \
    > "$out/fanout-check/$how.log" 2>&1
  code=$?
  end=$(date +%s.%N)
  echo "$how: exit $code, wall $(python3 -c "print(f'{$end - $start:.1f}')") s"
  tail -n 8 "$out/fanout-check/$how.log"
done
python3 - "$out/fanout-check" <<'PY'
import sys
from analysis.load import load_sweeps
for how in ("pinned", "fanout"):
    cells = load_sweeps([f"{sys.argv[1]}/{how}"]).cells
    print(f"{how}: {len(cells)} cells, statuses {dict(cells['status'].value_counts())}, "
          f"GPUs used {sorted(set(cells['gpu_index'].dropna().astype(int)))}")
PY
