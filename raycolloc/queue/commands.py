"""What each ``python -m raycolloc.queue`` command does, from its parsed arguments to its exit status
(the parser and the mapping of errors to exit 2 are in ``__main__``; a database another process owns,
one SQLite cannot keep in WAL mode, or a ``queue.db`` that is no database, exits 2 here)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import TypeVar

from raycolloc.queue.report import format_summary
from raycolloc.queue.settings import QueueSettings, compose_settings
from raycolloc.queue.state import JournalModeError, StoreBusy, StoreUnusable

T = TypeVar("T")

__all__ = ["live_command", "logs_command", "replay_command", "trace_command"]

_SUBMIT_FIELDS = ("job_id", "kind", "model", "dataset", "entry", "epochs", "samples", "max_slowdown")


def _refused_store(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Exit 2, with the reason, where the command's database may not be opened (nothing ran)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (StoreBusy, JournalModeError, StoreUnusable) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2

    return run


def trace_command(args: argparse.Namespace) -> int:
    from raycolloc.queue.trace import check_out, write_trace
    from raycolloc.queue.tracegen import check_count, generate

    check_count(args.jobs)  # the flags first: a refusal comes before the config is composed or a job drawn
    check_out(args.out)
    settings = compose_settings(args.words)
    jobs = generate(args.jobs, args.seed, settings.config.queue, settings.gpu)
    path = write_trace(args.out, jobs)
    print(f"wrote {path}: {len(jobs)} jobs over {jobs[-1].submit_s:.1f} s (GPU model {settings.gpu_label})")
    return 0


@_refused_store
def replay_command(args: argparse.Namespace) -> int:
    from raycolloc.queue.replay import replay

    settings = compose_settings(args.words)
    if settings.config.queue.runner == "ray":
        from raycolloc.queue.rayreplay import replay_ray

        print(f"replay of {args.trace} on the Ray cluster's GPUs: GPU model {settings.gpu_label}", flush=True)
        ran, code = _on_gpus(lambda: replay_ray(args.trace, settings), "the same command resumes")
        if ran is None:
            return code
        outcome = ran
    else:
        outcome = replay(args.trace, settings)
    print(format_summary(outcome.summary), flush=True)
    print(f"wrote {outcome.jobs_file}")
    return 0 if outcome.summary.complete else 1  # a job not ended (cancelled ones included): 1


def _on_gpus(run: Callable[[], T], again: str) -> tuple[T | None, int]:
    """``run`` on the cluster's GPUs with SIGTERM (a kill, timeout, Slurm) taken as Ctrl-C: its jobs
    stopped and its GPUs given back. Returns its result and 0, or None and the exit status: 1 where no
    GPU could be leased (nothing ran, the database keeps its jobs), 130/143 where it was interrupted
    (``again`` says how to resume)."""
    from raycolloc.driver import signals
    from raycolloc.driver.lease import LeaseError

    signals.install()
    try:
        return run(), 0
    except LeaseError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return None, 1
    except KeyboardInterrupt as exc:
        print(f"interrupted: jobs stopped, GPUs released; {again}", file=sys.stderr, flush=True)
        return None, signals.exit_status(exc)
    finally:
        signals.uninstall()


def _serve(settings: QueueSettings) -> int:
    """``serve`` until drained; Ctrl-C/SIGTERM stop its jobs and give its GPUs back (exit 130/143), and
    ``serve`` again resumes."""
    from raycolloc.queue import live

    queue = settings.config.queue
    where = f"runner={queue.runner}" + (f" GPU model {settings.gpu_label}" if queue.runner == "ray" else "")
    print(f"queue starting: db={live.live_db(settings)} policy={queue.policy} {where}", flush=True)

    def ready() -> None:  # what a user in another shell waits for: before it, `submit` finds no queue
        print("queue serving: submit, status and drain from another shell with the same out_dir", flush=True)

    summary, code = _on_gpus(lambda: live.serve(settings, _print_status, ready=ready), "`serve` again resumes")
    if summary is None:
        return code
    print(format_summary(summary), flush=True)
    return 0


def logs_command(args: argparse.Namespace) -> int:
    """``logs JOB``: the job's output as the live queue kept it (every attempt's), also after it ended
    or the queue stopped; exit 2 for a job the queue does not have."""
    from raycolloc.queue.live import live_db
    from raycolloc.queue.liveray import log_dir
    from raycolloc.queue.rayjobs import log_file
    from raycolloc.queue.state import Store

    settings = compose_settings(args.words)
    db = live_db(settings)
    if not db.is_file():
        print(f"error: no live queue's database at {db} (same out_dir or queue.db as `serve`)", file=sys.stderr)
        return 2
    store = Store(db, read_only=True)  # beside a running serve, which owns it
    try:
        record = store.job(args.job_id)
    finally:
        store.close()
    if record is None:
        print(f"error: logs: job_id: {args.job_id!r} is not a job of the queue at {db}", file=sys.stderr)
        return 2
    path = log_file(log_dir(db), args.job_id)
    if not path.is_file():
        why = "the simulated cluster runs no process" if settings.config.queue.runner != "ray" else "not started yet"
        print(f"{args.job_id}: no output ({record.state}; {why})", flush=True)
        return 0
    sys.stdout.write(path.read_text(errors="replace"))
    sys.stdout.flush()
    return 0


def _print_status(status: object) -> None:
    from raycolloc.queue.service import QueueStatus

    assert isinstance(status, QueueStatus)
    counts = " ".join(f"{k}={v}" for k, v in status.counts.items())
    drain = " (draining)" if status.draining else ""
    print(f"queue policy={status.policy} t={status.now:,.1f} s  {counts}{drain}", flush=True)


def _submission_fields(args: argparse.Namespace) -> dict[str, str]:
    """The ``submit`` flags given, checked as a trace row's are: a bad one is refused here (exit 2, named),
    before the live queue is looked for (with none running, it was "no live queue", exit 1)."""
    from raycolloc.queue.service import submission

    fields = {k: str(v) for k in _SUBMIT_FIELDS if (v := getattr(args, k)) is not None}
    fields.setdefault("kind", "timm")
    submission(fields)
    return fields


@_refused_store
def live_command(args: argparse.Namespace) -> int:
    """``serve``, ``submit``, ``status``, ``cancel``, ``drain``."""
    import ray

    from raycolloc.queue import live

    settings = compose_settings(args.words)
    if args.command == "serve":
        return _serve(settings)
    fields = _submission_fields(args) if args.command == "submit" else {}
    try:
        actor = live.find_actor(settings)
    except live.NoLiveQueue as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    if args.command == "submit":
        answer = ray.get(actor.submit.remote(fields), timeout=60)
        if answer.error is not None:
            print(f"error: {answer.error}", file=sys.stderr, flush=True)
            return 2
        print(f"queued {answer.job_id}")
        return 0
    if args.command == "status":
        status = ray.get(actor.status.remote(), timeout=60)
        _print_status(status)
        for gpu in status.gpus:
            print(f"  {gpu.gpu_id}  {gpu.mode or '-':<5} {gpu.mem_used_mib / 1024:6.1f} GiB  {', '.join(gpu.jobs)}")
        for job in status.jobs:  # every job, ended ones too: what happened to each is one command away
            again = f"  re-queued {job.requeues}x" if job.requeues else ""
            print(f"  {job.job_id}  {job.workload}  {job.state}  {job.gpu or ''}{again}")
        return 0
    if args.command == "cancel":
        was = ray.get(actor.cancel.remote(args.job_id), timeout=60)
        print(f"cancelled {args.job_id} (was {was})" if was else f"{args.job_id}: no such job, or already over")
        return 0 if was else 1
    ray.get(actor.drain.remote(), timeout=60)
    print("draining: the queue takes no new job")
    if args.wait:
        _print_status(live.wait_drained(actor))
    return 0
