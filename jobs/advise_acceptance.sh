#!/usr/bin/env bash
# Issue 18's acceptance on one GPU (about 5 minutes on an H200): the collocation advisor's predictions
# against a measured sweep, each workload predicted with parameters fitted on the other workloads only.
#   1. advise resnet26_cifar10, resnet50_imagenet64 and efficientnetv2s_imagenet64 (and their mix):
#      a solo profile each (one degree-1 naive cell, run through the engine), ranked tables, the
#      recommended cells as a sweep and a radT plan (nothing measured to fit on yet: default parameters);
#   2. the predicted sweep: naive and MPS at degrees 1, 2, 3, 7 of the three (their solos are the profiles, reused);
#   3. CaiT-XXS24 under MPS at degrees 1, 3, 7 (the study's flattening of the gain: 1.31x at 3 and 7 on an H200);
#   4. python -m raycolloc.advise --validate on both sweeps (leave-one-out: each workload's parameters
#      are fitted on the cells of the others), then the advice for each workload again, now fitted on
#      the measured sweeps of the other two.
# Every epoch lasts EPOCH_S seconds (default 3; epoch 2 is measured), data on the GPU (PLACEMENT=device).
# Usage (repo root): bash jobs/advise_acceptance.sh OUT_DIR
#        BACKEND=sim bash jobs/advise_acceptance.sh OUT_DIR   (simulated GPUs, tiny workloads: anywhere)
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
backend=${BACKEND:-gpu}
res="$out/res"
mkdir -p "$res"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
if [ "$backend" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"  # simulated GPUs of this check alone
  workloads=(tiny_cnn tiny_dlrm)
  large=tiny_dlrm
  common=(cluster=local "epoch_time_s=${EPOCH_S:-1}" "out_dir=$res")
else
  workloads=(resnet26_cifar10 resnet50_imagenet64 efficientnetv2s_imagenet64)
  large=cait_xxs24_imagenet
  common=("epoch_time_s=${EPOCH_S:-3}" "data.placement=${PLACEMENT:-device}" "out_dir=$res")
fi
log() { echo "=== $* ($(date +%T))"; }
py=python3
command -v "$py" > /dev/null || py=python
start=$(date +%s)

log "environment"
git rev-parse HEAD 2> /dev/null || true
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,mig.mode.current,memory.total --format=csv

log "1. advise ${workloads[*]} (profiles, ranked tables, the emitted sweep)"
words=()
for w in "${workloads[@]}"; do words+=("workload=$w"); done
$py -m raycolloc.advise "${words[@]}" "${common[@]}" max_slowdown=1.5 --emit-sweep 2>&1 | tee "$out/advise_before.log" \
  | grep -v '^\[sweep\]'

log "2. the predicted sweep: naive and MPS at degrees 1, 2, 3, 7"
list=$(IFS=,; echo "${workloads[*]}")
$py -m raycolloc.sweep -m "workload=$list" mode=naive,mps degree=1,2,3,7 "${common[@]}" \
  "hydra.sweep.dir=$res/sweep_main" > "$out/sweep_main.log" 2>&1
echo "exit $?"; sed -n '/^sweep /,$p' "$out/sweep_main.log"

log "3. $large under MPS at degrees 1, 3, 7"
$py -m raycolloc.sweep -m "workload=$large" mode=mps degree=1,3,7 "${common[@]}" \
  "hydra.sweep.dir=$res/sweep_large" > "$out/sweep_large.log" 2>&1
echo "exit $?"; sed -n '/^sweep /,$p' "$out/sweep_large.log"

log "4a. validate (leave-one-out)"
$py -m raycolloc.advise --validate "$res/sweep_main" "$res/sweep_large" --out "$out/validation.json" 2>&1 \
  | grep -v 'analysis.load'
validated=${PIPESTATUS[0]}
$py - "$out/validation.json" "$large" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
rows = [c for c in v["checks"] if c["predicted"]["workloads"] == sys.argv[2] and c["predicted"]["mode"] == "mps"]
solo = next((c["measured_agg_samples_per_s"] for c in rows if c["predicted"]["degree"] == 1), None)
for c in sorted(rows, key=lambda c: c["predicted"]["degree"]):
    p, m = c["predicted"], c["measured_agg_samples_per_s"]
    print(f"{sys.argv[2]} mps x{p['degree']}: predicted gain {p['gain']:.2f}, measured "
          f"{m / solo:.2f}" if m and solo else f"{sys.argv[2]} mps x{p['degree']}: predicted gain {p['gain']:.2f}, measured -")
EOF

log "4b. the advice again, each workload fitted on the measured sweeps of the others"
for w in "${workloads[@]}" "$large"; do
  $py -m raycolloc.advise "workload=$w" "${common[@]}" max_slowdown=1.5 2>&1 | tee "$out/advise_$w.log" \
    | sed -n '/^parameters:/,/^the model assumes:/p'
done

log "leftovers (expect none)"
ps -eo pid,cmd | grep -E "[n]vidia-cuda-mps|[r]aylet" || echo "no MPS daemon or raylet left"
command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
echo "validation exit status: $validated (0: every target met and no cell predicted to fit ran out of memory)"
echo "wall: $(( $(date +%s) - start )) s"
(cd "$out" && tar czf results.tgz res && rm -rf res)  # the Parquet of every cell, the advice and plans
