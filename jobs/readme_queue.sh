#!/usr/bin/env bash
# README's live queue as a user types it in two shells (issue 46): `serve` in the first, then `submit`,
# `status` and `drain` in the second, each a process of its own, with the words README gives. Each
# shell's output goes to a log of its own under OUT, each command line before its output; then
# `raycolloc doctor`. Run from the repository's root with its environment active.
#
#   bash jobs/readme_queue.sh OUT cluster=local          # the CPU machine: simulated GPUs (README's words)
#   bash jobs/readme_queue.sh OUT queue.runner=ray       # a GPU node: the job trains on its GPU
#
# The words after OUT go to `serve` only, as in README: the second shell's commands find the queue through
# the address `serve` writes under the default out_dir. Exit 0 if every command did and the job ended.
set -uo pipefail
OUT=${1:?usage: jobs/readme_queue.sh OUT [WORDS...]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# README's words name no out_dir: the queue's database is results/queue/live/ here. One left by an earlier
# run would be served again (a1 refused as a duplicate): move it aside rather than have it overwritten.
if [ -e results/queue/live/queue.sqlite ]; then
    echo "results/queue/live/queue.sqlite exists (an earlier live queue): move results/queue/live aside first" >&2
    exit 2
fi
if command -v raycolloc >/dev/null; then rc=(raycolloc); else rc=("${PYTHON:-python3}" -m raycolloc.cli); fi  # the same program
shell1="$OUT/shell1.log" shell2="$OUT/shell2.log"
: >"$shell2"
status=0

run() {  # one command of the second shell, as typed, then its output and exit status
    echo "\$ raycolloc $*" >>"$shell2"
    "${rc[@]}" "$@" >>"$shell2" 2>&1
    local code=$?
    echo "(exit $code)" >>"$shell2"
    [ "$code" = 0 ] || status=1
}

echo "\$ raycolloc queue serve $*" >"$shell1"
start=$(date +%s)
"${rc[@]}" queue serve "$@" >>"$shell1" 2>&1 &
serve=$!
trap 'kill -TERM "$serve" 2>/dev/null; wait "$serve"' EXIT  # stopped early: serve stops too (SIGTERM: its jobs and GPUs released)
# A user types in the second shell once the first says it serves (a GPU node may lease for minutes).
for _ in $(seq 1200); do grep -q "^queue serving:" "$shell1" && break; kill -0 "$serve" 2>/dev/null || break; sleep 0.5; done
if ! grep -q "^queue serving:" "$shell1"; then
    echo "serve never said it serves (see $shell1)" >&2
    cat "$shell1" >&2
    exit 1
fi
run queue submit --job-id a1 --model resnet18 --dataset cifar10 --samples 200000
run queue status
run queue drain
[ "$status" = 0 ] || { cat "$shell1" "$shell2" >&2; exit 1; }  # nothing drains it: the trap stops serve
wait "$serve"
code=$?
trap - EXIT
echo "(exit $code after $(($(date +%s) - start)) s)" >>"$shell1"
[ "$code" = 0 ] || status=1
grep -q "1/1 jobs ended" "$shell1" || status=1
"${rc[@]}" doctor >"$OUT/doctor.log" 2>&1 || status=1
for f in "$shell1" "$shell2" "$OUT/doctor.log"; do echo "=== $(basename "$f")"; cat "$f"; done
exit "$status"
