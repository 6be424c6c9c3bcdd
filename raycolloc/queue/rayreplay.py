"""A trace run to its end on a Ray cluster's GPUs (``queue.runner=ray``), in wall-clock time.

The same queue as a simulated replay (:mod:`raycolloc.queue.replay`): the trace read (and, with
``queue.profiles=catalog``, every job's profile found in the catalogue) and every job's cell built
(:func:`~raycolloc.queue.rayjobs.check_ray_config`), all before Ray is touched, so a bad trace or key
exits 2 with no GPU state changed. With ``queue.profiles=measured`` (the default) each distinct
workload is then profiled once on the cluster, or its profile cell reused
(:mod:`raycolloc.queue.profiles`); a workload without a profile has its jobs cancelled. Then every GPU
of the cluster (``cluster=...``: local, the simulated GPUs where there is no GPU, or an address) is
leased once and :class:`~raycolloc.queue.rayrunners.RayRunners` runs what the policy places. The queue's
clock is the wall clock since the run began (after its database's own clock, so a resumed run goes on
from where it stopped); a job arrives ``submit_s x queue.arrival_scale`` seconds in. The loop wakes
every ``TICK_S``: reports in, a placement pass, until every job has ended (a job whose attempts
failed ``MAX_FAILURES`` times other than out of memory is cancelled). Written beside the database
as by a simulated replay: ``jobs.parquet`` (slowdowns against the profiles' rates), ``gpus.parquet``
(each GPU's samples) and ``summary.json`` (energy from the GPUs' power samples; which profiles),
``profiles.json`` (the profiles used), and ``attempts.parquet`` (each attempt: outcome, GPU, mode,
memory estimate against its measured peak, samples/s). Everything is released in ``finally`` (running jobs stopped,
MPS daemons stopped, leases removed), also on Ctrl-C; the database keeps its state for a resume.
The energy the GPUs drew is kept in the database every ``SAVE_S`` and on the way out (Ctrl-C,
SIGTERM), so a resumed run's energy is its sessions' sum; the summary counts the sessions.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from raycolloc.config_checks import ConfigError
from raycolloc.queue.catalog import sim_params
from raycolloc.queue.core import Queue, Report, Runners
from raycolloc.queue.policies import create_policy
from raycolloc.queue.policy import Predictor
from raycolloc.queue.profiles import (
    PROFILES_FILE,
    cancel_unprofiled,
    fitted_params,
    from_catalog,
    measure_profiles,
    write_profiles,
)
from raycolloc.queue.rayjobs import check_ray_config
from raycolloc.queue.raylanes import POOL_SIZE
from raycolloc.queue.rayqueue import MAX_FAILURES, give_up_failed, open_runners, write_gpu_files
from raycolloc.queue.rayrunners import RayRunners
from raycolloc.queue.replay import ReplayOutcome, claim_run, lengths_known, run_dir, trace_digest, trace_profiles
from raycolloc.queue.report import job_rows, summarise, write_parquet, write_summary
from raycolloc.queue.settings import QueueSettings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import MAX_SUBMIT_S, TraceJob, read_trace, refuse_unprofiled_kind

__all__ = ["MAX_FAILURES", "TICK_S", "Polled", "replay_ray"]

log = logging.getLogger(__name__)

TICK_S = 0.2  # how often the loop looks for ended jobs and places waiting ones
SAVE_S = 5.0  # how often the energy drawn so far is written to the database (a kill loses at most this much)


def _unfinished(store: Store) -> int:
    counts = store.counts()
    return counts["queued"] + counts["placed"] + counts["started"]


class Polled(Runners, Protocol):
    """Runners the wall-clock loop asks for what finished, and how often each job's attempts failed."""

    failures: Counter[str]

    def poll(self, now: float) -> list[Report]: ...


def _loop(
    queue: Queue, runners: Polled, store: Store, clock: Callable[[], float], save: Callable[[], object] = lambda: None
) -> None:
    """Reports in and placements out every ``TICK_S`` until no job is left unfinished; ``save`` every
    ``SAVE_S``."""
    saved = clock()
    while True:
        now = clock()
        if now - saved >= SAVE_S:
            save()
            saved = now
        queue.handle(runners.poll(now))
        give_up_failed(store, runners.failures, now)
        if _unfinished(store) == 0:
            return
        queue.schedule(now)
        time.sleep(TICK_S)


def _check_arrivals(jobs: list[TraceJob], scale: float) -> None:
    """Refuse a ``queue.arrival_scale`` that puts the trace's last arrival past a trace's span (a replay
    that would wait for ever; NaN, which the config refuses too, stored no arrival at all)."""
    last = max(jobs, key=lambda j: j.submit_s)
    if not last.submit_s * scale <= MAX_SUBMIT_S:
        raise ConfigError(
            f"queue.arrival_scale={scale:g} is not allowed for this trace: its job {last.job_id} (submit_s "
            f"{last.submit_s:g}) would arrive {last.submit_s * scale:.3g} s in, after the {MAX_SUBMIT_S:g} s a "
            "trace may span; give a smaller scale"
        )


def replay_ray(trace: Path, settings: QueueSettings) -> ReplayOutcome:
    """Run ``trace`` on the Ray cluster's GPUs to its end (or resume it).

    Raises:
        TraceError: a malformed trace, or a job without a profile or length (nothing is queued).
        ConfigError: a job that cannot be built, a ``queue.inject_oom`` id not in the trace, a
            ``queue.arrival_scale`` that puts an arrival past a trace's span.
        TraceMismatch: the database holds another trace, policy, cluster or queue settings.
        StoreBusy: another process runs it.
        LeaseError: the cluster has no GPU, or one was not granted in time.
    """
    from raycolloc.driver.cluster import connect

    jobs = read_trace(trace)
    for job in jobs:  # a replay's profiles are measured per timm workload before its clock starts
        refuse_unprofiled_kind(job, f"{trace}: job {job.job_id}")
    _check_arrivals(jobs, settings.config.queue.arrival_scale)
    measuring = settings.config.queue.profiles == "measured"
    catalog = {} if measuring else trace_profiles(trace, jobs, settings)
    lengths_known(trace, jobs)
    maker = check_ray_config(settings.config, jobs)
    config, gpu = maker.config, settings.gpu
    settings = dataclasses.replace(settings, config=config)  # cluster.backend=auto resolved: the run's name
    directory = run_dir(trace, settings)
    db = Path(config.queue.db) if config.queue.db else directory / "queue.sqlite"
    store = Store(db)
    runners: RayRunners | None = None
    energy_base: float | None = None  # what earlier sessions of this database drew (J)

    def energy_saved() -> float:
        energy = (energy_base or 0.0) + (runners.energy_j if runners is not None else 0.0)
        store.put("energy_j", repr(energy))
        return energy

    try:
        claim_run(store, trace_digest(jobs), f"ray {config.cluster.backend} {gpu.name}", settings)
        connect(config.cluster, POOL_SIZE)  # before the profiles: the instance sized for the queue's pools
        found = measure_profiles(jobs, settings, directory) if measuring else from_catalog(jobs, catalog)
        write_profiles(directory / PROFILES_FILE, found)
        profiles, gpu = found.by_job, found.gpu(gpu)
        params = sim_params(gpu)
        if measuring and found.by_job:  # the parameters fitted on the measured sweeps under out_dir
            profiled_on = next(iter(found.by_job.values())).gpu_name
            params = fitted_params(Path(config.out_dir), profiled_on, params)
        predictor = Predictor(gpu, params)
        runners = open_runners(config, maker, {j.job_id: j for j in jobs}, predictor, settings)
        policy = create_policy(config.queue, gpu, predictor)
        queue = Queue(store, policy, runners, config.queue, gpu, lambda j: profiles[j.job_id])
        begin, t0 = store.clock(), time.monotonic()
        begun = bool(sum(store.counts().values()))
        sessions = int(store.meta("sessions") or 0)
        if not begun or _unfinished(store):  # a finished run shown again is no session
            sessions += 1
            store.put("sessions", str(sessions))
        energy_base = float(store.meta("energy_j") or 0.0)
        if begun:
            queue.resume(begin)
        else:
            scale = config.queue.arrival_scale
            arriving = [dataclasses.replace(j, submit_s=begin + j.submit_s * scale) for j in jobs]
            estimates = [p.job_mem_mib if (p := profiles.get(j.job_id)) else None for j in jobs]
            store.add(arriving, estimates, begin, config.queue.max_slowdown)
        cancel_unprofiled(store, found, begin)
        _loop(queue, runners, store, lambda: begin + time.monotonic() - t0, energy_saved)
        wall = time.monotonic() - t0
        energy = energy_saved()

        def alone(job: TraceJob) -> float | None:
            # A stand-in trains another model than a catalogue profile's: its time alone is not known
            # (a measured profile is the stand-in's own).
            profile = profiles.get(job.job_id)
            if profile is None or (config.queue.stand_in is not None and not measuring):
                return None
            return (job.length_samples or 0) / profile.samples_per_s

        # The rate each job trained at, from its attempt that ended (kept in the database: every session's).
        rates = store.ended_rates()

        def speed(job: TraceJob) -> float | None:
            profile, rate = profiles.get(job.job_id), rates.get(job.job_id)
            if profile is None or rate is None or not measuring:
                return None  # a catalogue's rate is no measurement to divide by
            return profile.samples_per_s / rate

        rows = job_rows(config.queue.policy, store.jobs(), alone, config.queue.max_slowdown, speed, truth="gpus")
        gpus = ",".join(sorted(lane.gpu.uuid for lane in runners.lanes.values()))
        summary = summarise(
            config.queue.policy, rows, energy, wall, found.source, sessions, gpus, len(store.ends_lost()), "gpus"
        )
        jobs_file = write_parquet(directory / "jobs.parquet", rows)
        write_gpu_files(directory, runners)
        write_summary(directory / "summary.json", summary)
    finally:
        try:
            if runners is not None:
                if energy_base is not None:
                    try:  # an interrupted session keeps what the GPUs drew, for the resume
                        energy_saved()
                    except Exception:  # the database may be what failed: still release everything
                        log.exception("queue: the energy drawn could not be saved")
                runners.close()
        finally:
            store.close()
    return ReplayOutcome(summary, directory, jobs_file)
