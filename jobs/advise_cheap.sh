#!/usr/bin/env bash
# Issue 44's cheaper advice on one GPU (about 6 minutes on an H200): advise a timm model named in no
# file of this project from a fresh out_dir with the advisor's defaults (its solo profile, the corpus
# as the prior, the pick and its plateau's knee confirmed in a short cell each), then measure what it
# ranked -- naive and MPS at each ranked degree, in a second fresh out_dir, cells as the advisor's
# (3 s epochs) -- and print the advisor's GPU time, the brute force's, their ratio, the pick, the best measured and the regret
# (jobs/advise_cheap.py summary; the bounds: ratio <= 30%, regret <= 5%). JSON: OUT/advise_cheap.json.
# Usage (repo root): bash jobs/advise_cheap.sh OUT
#        MODEL=<timm model> DATASET=cifar10 LIMIT_S=400 bash jobs/advise_cheap.sh OUT
# The default model is timm's RegNetX-400MF; its name is put together below, so that no file of the
# project holds it and the check that it is named nowhere means something.
#        BACKEND=sim bash jobs/advise_cheap.sh OUT   (simulated GPUs, tiny_cnn: the logic, anywhere)
#        EXTRA="cluster.address=HOST:PORT" ...        (words for both the advice and the sweep)
set -uo pipefail
out=$(realpath -m "${1:-${OUT:-/tmp/out}}")
mkdir -p "$out/res"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
start=$(date +%s)
limit=${LIMIT_S:-400}  # the whole script's wall time (the device call allows 420 s)
left() { echo $((limit - ($(date +%s) - start))); }
log() { echo "=== $* ($(date +%T), $(left) s left)"; }
py=python3
command -v "$py" > /dev/null || py=python
model=${MODEL:-regnetx_$(printf %03d 4)}
read -r -a extra <<< "${EXTRA:-}"
if [ "${BACKEND:-gpu}" = sim ]; then
  export RAYCOLLOC_SIM_ROOT="$out/sim"
  words=(workload=tiny_cnn)
  common=(cluster=local)
else
  words=(workload=timm "workload.model=$model" "workload.dataset=${DATASET:-cifar10}")
  common=()
  # "named nowhere": the model is in no text file of the project, nor among the corpus's models
  named=$(grep -rIlF --exclude-dir=.git --exclude-dir=.venv --exclude-dir=.devbundle --exclude-dir=results \
    -- "$model" . 2> /dev/null | head -5)
  in_corpus=$($py -c "import pandas as p, sys; print(int(sys.argv[1] in set(p.read_parquet('corpus/jobs.parquet')['model'])))" "$model" 2> /dev/null)
  echo "$model: named in ${named:-no file of the project}; in the corpus: ${in_corpus:-?} (1: yes)"
fi

log "environment"
git rev-parse HEAD 2> /dev/null || true
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,mig.mode.current,memory.total --format=csv

log "1. advise ${words[*]} from a fresh out_dir, defaults"
rm -rf "$out/res/adv"
timeout "$(left)" $py -m raycolloc.advise "${words[@]}" "${common[@]}" "${extra[@]}" "out_dir=$out/res/adv" \
  --out "$out/advice.json" > "$out/advise.log" 2>&1
echo "exit $?"; grep -v '^\[' "$out/advise.log" | grep -v '^  - ' | tail -n 45
[ -f "$out/advice.json" ] || { echo "no advice written"; exit 2; }

degrees=$($py jobs/advise_cheap.py degrees "$out/advice.json")
log "2. measure what it ranked: naive and MPS at degree=$degrees (a fresh out_dir)"
rm -rf "$out/res/brute"
timeout "$(( $(left) - 15 ))" $py -m raycolloc.sweep -m "${words[@]}" mode=naive,mps "degree=$degrees" \
  "${common[@]}" "${extra[@]}" epoch_time_s=3 "out_dir=$out/res/brute" "hydra.sweep.dir=$out/res/brute/sweep" \
  > "$out/brute.log" 2>&1
echo "exit $? (124: cut by the time limit; the summary judges what was measured)"
sed -n '/^sweep /,$p' "$out/brute.log" | tail -n 20

log "3. advise vs measuring everything it ranked"
$py jobs/advise_cheap.py summary "$out"
verdict=$?

log "leftovers (expect none)"
pgrep -fa "nvidia-cuda-mps|raylet" | cut -c1-160 | head -3 || echo "no MPS daemon or raylet left"
echo "wall: $(( $(date +%s) - start )) s"
(cd "$out" && tar czf results.tgz res && rm -rf res)
exit $verdict
