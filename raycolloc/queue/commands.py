"""What each ``python -m raycolloc.queue`` command does, from its parsed arguments to its exit status
(the parser and the mapping of errors to exit 2 are in ``__main__``; a database another process owns,
one SQLite cannot keep in WAL mode, or a ``queue.db`` that is no database, exits 2 here)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from raycolloc.queue.report import format_summary
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.state import JournalModeError, StoreBusy, StoreUnusable

__all__ = ["live_command", "replay_command", "trace_command"]

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
        from raycolloc.driver import signals
        from raycolloc.driver.lease import LeaseError
        from raycolloc.queue.rayreplay import replay_ray

        print(f"replay of {args.trace} on the Ray cluster's GPUs: GPU model {settings.gpu_label}", flush=True)
        signals.install()  # SIGTERM (timeout, Slurm) releases the GPUs as Ctrl-C does
        try:
            outcome = replay_ray(args.trace, settings)
        except LeaseError as exc:  # no GPU to lease: nothing ran, the database keeps its jobs
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt as exc:
            print("interrupted: jobs stopped, GPUs released; the same command resumes", file=sys.stderr, flush=True)
            return signals.exit_status(exc)
        finally:
            signals.uninstall()
    else:
        outcome = replay(args.trace, settings)
    print(format_summary(outcome.summary), flush=True)
    print(f"wrote {outcome.jobs_file}")
    return 0 if outcome.summary.complete else 1  # a job not ended (cancelled ones included): 1


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
        print(f"queue serving: db={live.live_db(settings)} policy={settings.config.queue.policy}", flush=True)
        print(format_summary(live.serve(settings, _print_status)), flush=True)
        return 0
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
        for job in status.jobs:
            if job.state != "ended":
                print(f"  {job.job_id}  {job.workload}  {job.state}  {job.gpu or ''}")
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
