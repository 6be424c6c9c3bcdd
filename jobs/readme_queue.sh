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
# A user types in the second shell once the first says it serves.
for _ in $(seq 600); do grep -q "^queue serving:" "$shell1" && break; kill -0 "$serve" 2>/dev/null || break; sleep 0.5; done
run queue submit --job-id a1 --model resnet18 --dataset cifar10 --samples 200000
run queue status
run queue drain
wait "$serve"
code=$?
echo "(exit $code after $(($(date +%s) - start)) s)" >>"$shell1"
[ "$code" = 0 ] || status=1
grep -q "1/1 jobs ended" "$shell1" || status=1
"${rc[@]}" doctor >"$OUT/doctor.log" 2>&1 || status=1
for f in "$shell1" "$shell2" "$OUT/doctor.log"; do echo "=== $(basename "$f")"; cat "$f"; done
exit "$status"
