"""``python -m raycolloc.queue``: a collocation-aware job queue.

::

    python -m raycolloc.queue trace --jobs N --seed S --out FILE.csv [cluster=...] [queue.trace_*=...]
    python -m raycolloc.queue replay FILE.csv [queue.policy=exclusive|carma|raycolloc] [cluster=...]
        [queue.sim_nodes=N queue.sim_gpus_per_node=G] [out_dir=...]
    python -m raycolloc.queue serve [queue.*=...] [cluster=...] [out_dir=...]
    python -m raycolloc.queue submit --job-id ID --model M --dataset D --samples N [--max-slowdown B] [out_dir=...]
    python -m raycolloc.queue submit --job-id ID --kind python|script --entry 'module:function'|'CMD' --samples N
    python -m raycolloc.queue status | cancel ID | logs ID | drain [--wait]   [out_dir=...]

``trace`` writes a Philly-like trace; ``replay`` runs one on the simulated cluster (virtual time), or
with ``queue.runner=ray`` on the Ray cluster's GPUs (wall-clock time), to the end, through the queue's
state database (resumed if the same command ran before and was stopped), prints a summary and writes
one row per job as Parquet. ``serve`` runs a live queue (a detached Ray actor) until it is drained: on
simulated GPUs (``queue.runner=sim``, catalogued timm models), or with ``queue.runner=ray`` on the Ray
cluster's GPUs (any workload: timm, ``python``, ``script``; a workload's first job runs alone and
profiles it); ``submit``, ``status``, ``cancel`` and ``drain`` talk to it, ``logs`` reads a job's output
(``queue.runner=ray``) beside its database. SIGTERM/Ctrl-C stop ``serve`` with its jobs stopped and its
GPUs released (143/130); ``serve`` again resumes, the jobs it ran re-queued.
Exit status: 0; 2 for a config error, a malformed or cut trace, a ``--out`` or ``--jobs`` a trace cannot have, or a
refused submission (named, nothing queued), ``logs`` of a job the queue does not have, a Ray address where no
cluster answers, or a database another process owns, that was made with other ``queue.*`` settings, that is another
program's SQLite file or that is damaged; 1 for a replay that did not end every job or found no GPU to lease, a
cancel of no such job, or no live queue to talk to (said within seconds, also where a killed ``serve`` left its
address); 130/143 for a ``queue.runner=ray`` replay stopped by Ctrl-C/SIGTERM. A resume that finds its database lost
committed changes (its ``-wal`` file) says so, naming the jobs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from raycolloc.config import ConfigError
from raycolloc.queue.catalog import NoProfile
from raycolloc.queue.commands import live_command, logs_command, replay_command, trace_command
from raycolloc.queue.state import TraceMismatch
from raycolloc.queue.trace import TraceError

__all__ = ["main"]

log = logging.getLogger("raycolloc")


def _words(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", nargs="*", help="overrides: queue.*=..., cluster=..., out_dir=...")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m raycolloc.queue",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    trace = sub.add_parser("trace", help="write a Philly-like trace")
    trace.add_argument("--jobs", type=int, required=True, help="how many jobs")
    trace.add_argument("--seed", type=int, default=0, help="the same seed writes the same trace")
    trace.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    _words(trace)
    replay = sub.add_parser("replay", help="run a trace on the simulated cluster")
    replay.add_argument("trace", type=Path, help="the trace (CSV)")
    _words(replay)
    _words(sub.add_parser("serve", help="run a live queue until it is drained"))
    submit = sub.add_parser("submit", help="queue one job on the live queue")
    for field in ("job-id", "kind", "model", "dataset", "entry", "epochs", "samples", "max-slowdown"):
        submit.add_argument(f"--{field}", default=None)
    _words(submit)
    _words(sub.add_parser("status", help="the live queue's jobs and GPUs"))
    cancel = sub.add_parser("cancel", help="cancel a job of the live queue")
    cancel.add_argument("job_id")
    _words(cancel)
    logs = sub.add_parser("logs", help="a job's output (its stdout and stderr), also after it ended")
    logs.add_argument("job_id")
    _words(logs)
    drain = sub.add_parser("drain", help="the live queue takes no new job and runs empty")
    drain.add_argument("--wait", action="store_true", help="wait until it is drained")
    _words(drain)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one queue command; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    args = _parser().parse_args(argv)
    try:
        if args.command == "trace":
            return trace_command(args)
        if args.command == "replay":
            return replay_command(args)
        if args.command == "logs":
            return logs_command(args)
        return live_command(args)
    except (ConfigError, TraceError, NoProfile, TraceMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
