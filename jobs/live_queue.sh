#!/usr/bin/env bash
# The live queue on Ray's GPUs as a user runs it (issue 45): `serve queue.runner=ray` in the background,
# then, as from another shell, six submissions of three kinds (two timm models, a python entry, the
# unmodified script jobs/examples/plain_train.py printing its own epoch lines), one cancelled, `status` at
# three moments, `logs` of two jobs, `drain --wait`. Then a second phase: `serve` again, a few jobs,
# SIGTERM to `serve` while they run, `serve` again: it resumes and every job ends once. At the end `ps`
# and `nvidia-smi` (or `raycolloc doctor`) show nothing of raycolloc. Everything is logged under OUT.
#
#   bash jobs/live_queue.sh OUT                 # on a GPU node: its real GPUs (~10 min on one H200)
#   BACKEND=sim bash jobs/live_queue.sh OUT     # on the CPU: cluster=local's simulated GPUs, tiny jobs
#   PHASES=2 bash jobs/live_queue.sh OUT        # the SIGTERM-and-resume phase alone (PHASES="1 2": both)
#
# Run from the repository's root with its environment active (python is raycolloc's). Exit 0 only if every
# job ended or was cancelled exactly once and nothing of raycolloc is left.
set -uo pipefail

OUT=${1:?usage: jobs/live_queue.sh OUT}
BACKEND=${BACKEND:-gpu}
PHASES=${PHASES:-1 2}
case " $PHASES " in *" 1 "* | *" 2 "*) ;; *) echo "PHASES=$PHASES is not allowed; choose 1, 2 or \"1 2\"" >&2; exit 2 ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
LOG="$OUT/live_queue.log"
: >"$LOG"
PY=${PYTHON:-python}
PLAIN="$ROOT/jobs/examples/plain_train.py"

# MPS pipes under a short directory of their own (a socket's path has ~100 characters; OUT may be long).
PIPES=$(mktemp -d /tmp/rclq.XXXXXX)
WORDS=(out_dir="$OUT/results" queue.runner=ray mode.pipe_root="$PIPES")
if [ "$BACKEND" = sim ]; then
    WORDS+=(cluster=local cluster.num_gpus=2)
    TIMM_A=(--model resnet10t --dataset cifar10 --samples 256)
    TIMM_B=(--model mobilenetv3_small_050 --dataset cifar10 --samples 256)
    TIMM_LONG=(--model resnet10t --dataset cifar10 --samples 50000000)
    PY_ENTRY=(--kind python --entry tests.sleepy_workload:build --samples 640)
    LONG=(--kind python --entry tests.sleepy_workload:build --samples 200000) # ~80 s: running at the SIGTERM
    SCRIPT=(--kind script --entry "python $PLAIN --epochs 3 --steps 2 --batch-size 8" --samples 48)
elif [ "$BACKEND" = gpu ]; then
    TIMM_A=(--model resnet18 --dataset cifar10 --samples 200000)
    TIMM_B=(--model mobilenetv3_large_100 --dataset cifar10 --samples 200000)
    TIMM_LONG=(--model resnet18 --dataset cifar10 --samples 500000000)
    PY_ENTRY=(--kind python --entry jobs.examples.tiny_regression:build --samples 2000000)
    LONG=(--model resnet18 --dataset cifar10 --samples 1000000) # about a minute: running at the SIGTERM
    SCRIPT=(--kind script --entry "python $PLAIN --model resnet18 --epochs 4 --steps 200 --batch-size 128"
        --samples 102400)
else
    echo "BACKEND=$BACKEND is not allowed; choose gpu or sim" >&2
    exit 2
fi

say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
# One queue command, as typed in another shell; its output (Ray's connection lines left out) to the log.
q() {
    say "\$ raycolloc queue $*"
    "$PY" -m raycolloc.queue "$@" "${WORDS[@]}" 2>&1 | grep -v -E "worker.py:[0-9]+ -- (Connecting|Connected)" | tee -a "$LOG"
    return "${PIPESTATUS[0]}"
}
serve_bg() { # serve in the background, its output to OUT/serve-N.log; waits until it answers
    local n=$1 address="$OUT/results/queue/live/ray-address"
    rm -f "$address"
    say "\$ raycolloc queue serve ${WORDS[*]} &   (output: serve-$n.log)"
    "$PY" -m raycolloc.queue serve "${WORDS[@]}" >"$OUT/serve-$n.log" 2>&1 &
    SERVE=$!
    for _ in $(seq 600); do
        [ -f "$address" ] && return 0
        kill -0 "$SERVE" 2>/dev/null || break
        sleep 1
    done
    say "serve did not come up:"; tail -30 "$OUT/serve-$n.log" | tee -a "$LOG"
    exit 1
}
wait_for() { # wait_for JOB STATE: until JOB is in STATE, read from the queue's database (a status takes seconds)
    "$PY" - "$OUT/results/queue/live/queue.sqlite" "$1" "$2" <<'WAIT'
import sys
import time
from raycolloc.queue.state import Store

db, job, want = sys.argv[1:]
for _ in range(1200):
    store = Store(db, read_only=True)
    record = store.job(job)
    store.close()
    if record is not None and record.state == want:
        sys.exit(0)
    time.sleep(0.5)
print(f"{job} never {want}", flush=True)
sys.exit(1)
WAIT
}
wait_serve() { # wait for serve to exit; log its tail and exit status
    local rc=0
    wait "$SERVE" || rc=$?
    say "serve exited $rc; its last lines:"
    tail -8 "$OUT/serve-$1.log" | tee -a "$LOG"
    return 0
}

say "live queue on $BACKEND: OUT=$OUT"
# --- phase 1: six jobs of three kinds, one cancelled --------------------------------------------------
if [[ " $PHASES " == *" 1 "* ]]; then
serve_bg 1
q submit --job-id timm-a "${TIMM_A[@]}"
q submit --job-id timm-b "${TIMM_B[@]}"
q submit --job-id py-c "${PY_ENTRY[@]}"
q submit --job-id script-d "${SCRIPT[@]}"
q submit --job-id timm-e "${TIMM_A[@]}" # timm-a's workload: packed by its profile once timm-a ran
q submit --job-id timm-long "${TIMM_LONG[@]}"
q status # moment 1: just submitted
wait_for timm-long started
q status # moment 2: the long job running
q cancel timm-long
wait_for script-d ended
q logs script-d
q logs timm-a
q status # moment 3: before the drain
q drain --wait
wait_serve 1
q logs timm-long # a cancelled job's output, after serve ended
say "\$ raycolloc queue logs no-such-job   (exit 2 expected)"
"$PY" -m raycolloc.queue logs no-such-job "${WORDS[@]}" >>"$LOG" 2>&1
say "exit $?"
fi

# --- phase 2: SIGTERM to serve while jobs run, serve again: it resumes -----------------------------
if [[ " $PHASES " == *" 2 "* ]]; then
serve_bg 2
q submit --job-id r1 "${LONG[@]}"
q submit --job-id r2 "${TIMM_A[@]}"
q submit --job-id r3 "${SCRIPT[@]}"
wait_for r1 started
sleep 3
say "kill -TERM serve ($SERVE) while jobs run"
kill -TERM "$SERVE"
wait_serve 2
serve_bg 3
q status # the jobs serve 2 ran are queued again
q drain --wait
wait_serve 3
fi

# --- every job ended or was cancelled exactly once; nothing left -------------------------------------
say "events per job (from the queue's database):"
"$PY" - "$OUT/results/queue/live/queue.sqlite" <<'EOF' 2>&1 | tee -a "$LOG"
import sys
from collections import Counter
from raycolloc.queue.state import Store

store = Store(sys.argv[1], read_only=True)
events = store.events()
jobs = [r.job.job_id for r in store.jobs()]
store.close()
over = {j: Counter(k for _, job, k, _ in events if job == j) for j in jobs}
bad = []
for j in jobs:
    c = over[j]
    print(f"  {j:10s} ended={c['ended']} cancelled={c['cancelled']} requeued={c['requeued']} oom={c['oom']}")
    if c["ended"] + c["cancelled"] != 1:
        bad.append(j)
print("every job ended or was cancelled exactly once" if not bad else f"NOT exactly once: {bad}")
sys.exit(1 if bad else 0)
EOF
ONCE=${PIPESTATUS[0]}
say "\$ ps -eo pid,args | grep raycolloc"
if [ "$BACKEND" = gpu ]; then # a GPU node of its own: nothing of raycolloc or Ray may be left
    LEFT=$(ps -eo pid,args | grep -E "raycolloc|raylet|gcs_server" | grep -v -E "grep|live_queue.sh" || true)
else # a shared CPU machine: this run's own (its out_dir or its MPS pipes in the command line)
    LEFT=$(ps -eo pid,args | grep -F -e "$OUT" -e "$PIPES" | grep -v -E "grep|live_queue.sh" || true)
fi
echo "${LEFT:-(none)}" | tee -a "$LOG"
if command -v nvidia-smi >/dev/null; then
    say "\$ nvidia-smi"
    nvidia-smi | tee -a "$LOG"
fi
say "\$ raycolloc doctor --pipe-root $PIPES"
"$PY" -m raycolloc.doctor --pipe-root "$PIPES" 2>&1 | tee -a "$LOG"
DOCTOR=${PIPESTATUS[0]}
say "exactly once: $([ "$ONCE" = 0 ] && echo yes || echo NO); doctor exit $DOCTOR; processes left: $([ -z "$LEFT" ] && echo none || echo SOME)"
[ "$ONCE" = 0 ] && [ "$DOCTOR" = 0 ] && [ -z "$LEFT" ]
