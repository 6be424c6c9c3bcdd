#!/usr/bin/env bash
# Do a solo's short repeats read its rate differently from whole ones? The quick matrix's short repeats
# read above their first run in every configuration of three GPU sweeps (median +17.7%), whole ones did
# not (2026-12-05, docs/measurements.md), but those were different sweeps at different times. Here one
# solo configuration runs in sweeps that alternate whole repeats (measure.repeat_floor=1) and short ones
# (0.3), PAIRS times, so the host's drift falls on both alike. Prints each sweep's runs and, per floor,
# the repeats' rate over their own first run's and over the neighbouring sweeps' first runs; writes JSON.
# Usage (repo root, a GPU machine): bash jobs/check_repeat_bias.sh OUT_DIR [PAIRS]  (SOLO="...": another
# solo configuration; EXTRA=cluster=local: the simulated backend, to try the script anywhere)
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
pairs=${2:-2}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=$(command -v python || command -v python3)
read -ra extra <<< "${EXTRA:-}"
read -ra solo <<< "${SOLO:-degree=1 mode=naive workload=resnet26_cifar10 epoch_samples=25600}"
for i in $(seq 1 "$pairs"); do
  for floor in 1 0.3; do
    echo "=== pair $i, measure.repeat_floor=$floor ($(date +%T))"
    $py -m raycolloc.sweep "${solo[@]}" measure.repeat_floor="$floor" "${extra[@]}" \
      out_dir="$out/p$i-f$floor" > "$out/p$i-f$floor.log" 2>&1
    echo "exit $?"
  done
done
$py - "$out" <<'PY'
import glob, json, statistics, sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
sweeps = []
for d in sorted(out.glob("p*-f*"), key=lambda p: p.stat().st_mtime):
    files = glob.glob(f"{d}/**/cells.parquet", recursive=True)
    if not files:
        continue
    c = pd.concat([pd.read_parquet(f) for f in files])
    c = c[c["status"] == "ok"].sort_values("repeat")
    rates = [float(r) for r in c["agg_samples_per_s"]]
    if len(rates) >= 2:
        sweeps.append({"sweep": d.name, "floor": d.name.split("-f")[1], "first": rates[0], "repeats": rates[1:]})
print(f"{'sweep':<10} {'first':>9}  repeats (samples/s)")
for s in sweeps:
    print(f"{s['sweep']:<10} {s['first']:>9,.0f}  " + "  ".join(f"{r:,.0f}" for r in s["repeats"]))
every_first = statistics.median(s["first"] for s in sweeps) if sweeps else 0.0
summary = {}
for floor in ("1", "0.3"):
    own = [r / s["first"] - 1 for s in sweeps if s["floor"] == floor for r in s["repeats"]]
    every = [r / every_first - 1 for s in sweeps if s["floor"] == floor for r in s["repeats"]]
    if own:
        summary[floor] = {"repeats": len(own), "vs_own_first_median": statistics.median(own),
                          "vs_all_firsts_median": statistics.median(every)}
        print(f"repeat_floor={floor}: {len(own)} repeats, over their own first run median {100 * statistics.median(own):+.1f}%"
              f" ({100 * min(own):+.1f}% to {100 * max(own):+.1f}%), over every sweep's first runs' median"
              f" {100 * statistics.median(every):+.1f}%")
(out / "repeat_bias.json").write_text(json.dumps({"sweeps": sweeps, "summary": summary}, indent=1))
PY
$py -m raycolloc.doctor | tail -1
