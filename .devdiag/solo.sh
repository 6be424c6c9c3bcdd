#!/usr/bin/env bash
# Solo diagnostic: check_solo_spread default vs variants, with a thread sampler. Usage: solo.sh OUT
out=$1; mkdir -p "$out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
nproc; lscpu | grep -E "Model name|NUMA node|Thread|Core" ; nvidia-smi -L
sample() {  # every 2 s: the 45 busiest threads, with the core each last ran on
  while true; do echo "--- $(date +%T)"; ps -eLo pid,tid,psr,pcpu,stat,comm --sort=-pcpu --no-headers | head -45; sleep 2; done
}
sample > "$out/threads.log" 2>&1 & sp=$!
i=0
for variant in "" "trainer.num_cpus=2 trainer.torch_threads=1" "cluster.reserved_cpus=none"; do
  i=$((i+1)); echo "=== variant $i: [$variant] $(date +%T)"
  echo "=== variant $i $(date +%T)" >> "$out/threads.log"
  python3 jobs/check_solo_spread.py --out "$out/solo$i.json" --work "$out/solo$i" --raw-runs 2 \
    cluster.max_concurrent_cells=1 $variant 2>&1 | tail -n 6
  python3 - "$out/solo$i" "$out/solo$i-cells.csv" <<'PY'
import sys
from pathlib import Path
import pandas as pd
ps = list(Path(sys.argv[1]).rglob("cells.parquet")); js = list(Path(sys.argv[1]).rglob("jobs.parquet"))
c = pd.concat([pd.read_parquet(p) for p in ps]); j = pd.concat([pd.read_parquet(p) for p in js])
c.to_csv(sys.argv[2], index=False); j.to_csv(sys.argv[2].replace("cells", "jobs"), index=False)
cols = [k for k in ("repeat","agg_samples_per_s","rate_cv","cpu_wait_share_max","core_mhz_min","invol_switches_per_s_max","reserved_cpus","setup_s") if k in c]
print(c[cols].to_string())
PY
done
kill $sp
