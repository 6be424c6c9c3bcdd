"""``python -m raycolloc.queue``: a collocation-aware job queue.

::

    python -m raycolloc.queue trace --jobs N --seed S --out FILE.csv [cluster=...] [queue.trace_*=...]
    python -m raycolloc.queue replay FILE.csv [queue.policy=exclusive|carma|raycolloc] [cluster=...]
        [queue.sim_nodes=N queue.sim_gpus_per_node=G] [out_dir=...]

``trace`` writes a Philly-like trace; ``replay`` runs one on the simulated cluster (virtual time) to
the end, through the queue's state database (resumed if the same command ran before and was
stopped), prints a summary and writes one row per job as Parquet. Exit status: 0; 2 for a config
error or a malformed trace (named, nothing queued); 1 for a replay that did not end every job.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from raycolloc.config import ConfigError
from raycolloc.queue.catalog import NoProfile
from raycolloc.queue.state import TraceMismatch
from raycolloc.queue.trace import TraceError

__all__ = ["main"]

log = logging.getLogger("raycolloc")


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
    trace.add_argument("words", nargs="*", help="overrides: cluster=..., queue.trace_*=...")
    replay = sub.add_parser("replay", help="run a trace on the simulated cluster")
    replay.add_argument("trace", type=Path, help="the trace (CSV)")
    replay.add_argument("words", nargs="*", help="overrides: queue.policy=..., cluster=..., out_dir=...")
    return p


def _trace(args: argparse.Namespace) -> int:
    from raycolloc.queue.settings import compose_settings
    from raycolloc.queue.trace import write_trace
    from raycolloc.queue.tracegen import generate

    if args.jobs < 1:
        raise ConfigError(f"--jobs={args.jobs} is not allowed; it must be an integer >= 1")
    settings = compose_settings(args.words)
    jobs = generate(args.jobs, args.seed, settings.config.queue, settings.gpu)
    path = write_trace(args.out, jobs)
    print(f"wrote {path}: {len(jobs)} jobs over {jobs[-1].submit_s:.1f} s (GPU model {settings.gpu.name})")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from raycolloc.queue.replay import format_summary, replay
    from raycolloc.queue.settings import compose_settings

    settings = compose_settings(args.words)
    outcome = replay(args.trace, settings)
    print(format_summary(outcome.summary), flush=True)
    print(f"wrote {outcome.jobs_file}")
    return 0 if outcome.summary.complete else 1


def main(argv: list[str] | None = None) -> int:
    """Run one queue command; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    args = _parser().parse_args(argv)
    try:
        return _trace(args) if args.command == "trace" else _replay(args)
    except (ConfigError, TraceError, NoProfile, TraceMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
