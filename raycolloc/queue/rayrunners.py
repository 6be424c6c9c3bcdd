"""The queue's jobs on a Ray cluster's GPUs: :class:`RayRunners`, the real :class:`~raycolloc.queue.core.Runners`.

Each attempt of a placed job is a cell of one job (:mod:`raycolloc.queue.rayjobs`) lived by the sweeps'
own life of a job on a GPU (:func:`raycolloc.driver.cell_run.run_cell`) on the GPU's lane
(:mod:`raycolloc.queue.raylanes`): it joins the GPU's residents (under MPS the daemon the first of them
started serves them all; the mode stops it when the GPU empties), starts, sets up, trains its epochs under
the stall watch and the time-outs, is sampled, finishes and releases, its failures kept as its job's
state. The life blocks, and the queue's loop must not: each attempt lives on a thread of its own,
:meth:`RayRunners.start` returns at once and :meth:`RayRunners.poll` collects the attempts whose life
ended. An attempt ends ``ended`` (every state ok), ``oom`` (a state says so: the trainer returns an
out-of-memory as ``status=oom``) or ``lost`` (an error, a hang, its actor died, or its GPU could not be
prepared; counted in :attr:`RayRunners.failures`), with its memory peak (PyTorch's reserved peak or the
driver's count, the larger), its samples/s and why it failed. :meth:`RayRunners.close` stops the lives
still running (each releases its GPU as a sweep's interrupted cell does) and gives the GPUs back. A node
lost while the queue runs (:mod:`raycolloc.queue.raynodes`) takes its GPUs out of the runner, and its
attempts come back ``lost`` without counting as their jobs' failures.

What a policy sees of a GPU (:meth:`RayRunners.views`): its memory in use, read through the steward
(NVML, or the simulated GPU's count), or its residents' estimates while they are larger (a job just
placed has allocated nothing yet); its SM activity, SM occupancy and DRAM activity as means over the
monitor's rolling window of GPM readings (the steward's ``gpu_now``); without GPM, SM activity is
NVML's utilisation and occupancy and DRAM activity are what the advisor's model predicts for its jobs.
A GPU with ``POOL_SIZE`` jobs shows itself full.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import ray

from raycolloc.advise.profile import Profile
from raycolloc.driver.cell_run import run_cell
from raycolloc.driver.lane import Lane
from raycolloc.driver.tabulate import CellRecord
from raycolloc.queue.core import JobStart, Report
from raycolloc.queue.policy import GpuView, Predictor, Resident
from raycolloc.queue.rayjobs import CellMaker
from raycolloc.queue.raylanes import POOL_SIZE, QueueLane, close_lane
from raycolloc.queue.raynodes import NodeWatch, leave
from raycolloc.queue.simcluster import MONITOR_WINDOW_S, TelemetryRow
from raycolloc.queue.trace import TraceJob
from raycolloc.spec import CellSpec, JobState

__all__ = ["CLOSE_WAIT_S", "SAMPLE_S", "AttemptRow", "RayRunners", "measured"]

log = logging.getLogger(__name__)
SAMPLE_S = 1.0  # how often each GPU's memory, utilisation and power are read (one steward call each)
# How long closing waits for the lives still running to release their GPUs once told to stop: a life looks
# at its cancel flag every cell_run.POLL_S (2 s), then kills its trainers and releases (seconds). One that
# has not ended by then (a steward call that hangs) is left: its GPU's release_gpu and lease go regardless.
CLOSE_WAIT_S = 60.0


@dataclass(frozen=True)
class AttemptRow:
    """One finished attempt as it ran (``attempts.parquet``): how it ended, where, under which mode,
    its memory estimate against its measured peak (MiB), its samples/s, and who shared its GPU."""

    job_id: str
    attempt: int
    outcome: str
    gpu: str
    mode: str
    start_s: float
    end_s: float
    estimate_mib: float
    mem_peak_mib: float | None
    samples_per_s: float | None
    co_residents: str
    error: str | None  # why it failed, as its job's state says (None: it ended)


class _Life:
    """One attempt's life (:func:`~raycolloc.driver.cell_run.run_cell`) on a thread of its own: the life
    waits on the job's calls, and the queue's loop must not."""

    def __init__(self, cell: CellSpec, lane: Lane) -> None:
        self.cancel = threading.Event()  # this life's own: a cancelled job stops, its GPU's others go on
        self.cell, self.lane = cell, dataclasses.replace(lane, cancel=self.cancel)
        self.record: CellRecord | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        # A daemon thread: an interpreter leaving without close() (a crash) is not held up by a life.
        self.thread = threading.Thread(target=self._live, name=f"raycolloc-{cell.cell_id}", daemon=True)
        self.thread.start()

    def _live(self) -> None:
        try:
            self.record = run_cell(self.cell, self.lane, time.time())
        except BaseException as exc:  # noqa: BLE001 - the queue's loop reads it: the attempt is lost
            self.error = exc
        finally:
            self.done.set()

    def states(self) -> tuple[list[JobState], str | None]:
        """The job's states as its life ended, and why it failed (None: it did not; a life that failed
        outside its job, e.g. its GPU could not be prepared, failed whatever its states say)."""
        if self.error is not None or self.record is None:
            return [], f"{type(self.error).__name__}: {self.error}"[:2000]
        states = [self.record.states[i] for i in sorted(self.record.states)]
        failed = next((s.error for s in states if not s.ok), None)
        if self.record.status != "ok" or not states:
            return states, self.record.reason or failed or f"status={self.record.status}"
        return states, failed


@dataclass
class _Run:
    job_id: str
    attempt: int
    life: _Life | None  # None: never started (a test's stand-in)
    profile: Profile
    estimate_mib: float
    max_slowdown: float
    mode: str
    start_s: float
    co: set[str] = field(default_factory=set)


def measured(states: list[JobState]) -> tuple[float | None, float | None]:
    """An attempt's memory peak (MiB) and samples/s from its trainer's states (None: not measured)."""
    peaks = [e.peak_mem_reserved_mib for s in states for e in s.epochs if e.peak_mem_reserved_mib is not None]
    peaks += [s.info.nvml_mem_mib for s in states if s.info.nvml_mem_mib is not None]
    rates = [e.samples_per_s for s in states for e in s.epochs if e.samples_per_s is not None]
    return (max(peaks) if peaks else None, rates[-1] if rates else None)


def _outcome(states: list[JobState], why: str | None) -> Literal["ended", "oom", "lost"]:
    """``oom`` where a state says so (re-queued with a larger estimate), ``lost`` where the life failed
    otherwise (``why``), ``ended`` where every state is ok."""
    if any(s.status == "oom" for s in states):
        return "oom"
    return "lost" if why is not None or not all(s.ok for s in states) else "ended"


class RayRunners:
    """The queue's runners on leased GPUs (see the module docstring); :meth:`close` gives them back."""

    def __init__(self, lanes: list[QueueLane], maker: CellMaker, jobs: dict[str, TraceJob], predictor: Predictor):
        self.lanes = {lane.gpu_id: lane for lane in lanes}
        self.maker, self.jobs, self.predictor = maker, jobs, predictor
        self.energy_j = 0.0
        self.telemetry: list[TelemetryRow] = []
        self._runs: dict[str, list[_Run]] = {gpu_id: [] for gpu_id in self.lanes}
        self._pending: list[Report] = []  # attempts that could not start, reported at the next poll
        self.attempts: list[AttemptRow] = []  # every finished attempt, in the order they finished
        self.failures: Counter[str] = Counter()  # attempts per job that failed (not an OOM): the loop gives up
        self.nodes = NodeWatch()

    # --- the Runners protocol ------------------------------------------------------------------
    def views(self, now: float) -> list[GpuView]:
        """Every leased GPU as a policy sees it at ``now``."""
        self._sample(now)
        return [self._view(lane, now) for lane in self.lanes.values()]

    def start(self, placed: JobStart) -> None:
        """Start the attempt's life on the GPU; returns at once (it lives on a thread: :class:`_Life`)."""
        job_id, attempt, gpu_id, mode, now = placed.job_id, placed.attempt, placed.gpu_id, placed.mode, placed.now
        lane, runs = self.lanes[gpu_id], self._runs[gpu_id]
        if runs and lane.mode is not None and lane.mode != mode:
            # A mode changes only on an empty GPU: a naive binding would stop the MPS server under its jobs.
            log.warning(
                "gpu=%s runs %s jobs; %s asked for %s: it joins as %s", gpu_id, lane.mode, job_id, mode, lane.mode
            )
            mode = lane.mode
        if len(runs) >= POOL_SIZE:  # one pass placed past the pool: no share of the lease is left for it
            log.warning("gpu=%s holds %d jobs already: %s goes back to the queue", gpu_id, len(runs), job_id)
            self._pending.append(Report(job_id, attempt, "lost", now, ()))
            return
        cell = self.maker.cell(self.jobs[job_id], attempt, mode, int(placed.samples))
        life = _Life(cell, lane.lane)
        run = _Run(job_id, attempt, life, placed.profile, placed.estimate_mib, placed.max_slowdown, mode, now)
        for other in runs:
            other.co.add(job_id)
            run.co.add(other.job_id)
        runs.append(run)
        lane.mode, lane.last_placed_s = mode, now

    def running(self) -> frozenset[tuple[str, int]]:
        return frozenset((r.job_id, r.attempt) for runs in self._runs.values() for r in runs)

    # --- the loop's other calls ----------------------------------------------------------------
    def poll(self, now: float) -> list[Report]:
        """The attempts whose life ended since the last poll (their GPUs' places freed), sampling the
        GPUs when due."""
        self._sample(now)
        out, self._pending = self._pending, []
        finished = [(gpu_id, run) for gpu_id, runs in self._runs.items() for run in runs if _finished(run)]
        # An attempt that ended may have died with its node: the nodes are looked at before it is settled.
        out += self._lose_nodes(now, force=bool(finished))
        for gpu_id, run in finished:
            if gpu_id in self.lanes:
                out.append(self._settle(self.lanes[gpu_id], run, now))
        return out

    def stop(self, job_id: str) -> bool:
        """Stop ``job_id``'s running attempt (a cancel): its life told to stop (its trainer and training
        process killed, its cell released, the mode undone if it was the GPU's last), waited for up to
        ``CLOSE_WAIT_S``; no report follows. False: it was not running."""
        for gpu_id, runs in self._runs.items():
            for run in runs:
                if run.job_id == job_id:
                    runs.remove(run)
                    if run.life is not None:
                        run.life.cancel.set()
                        if not run.life.done.wait(CLOSE_WAIT_S):
                            log.warning("job=%s still stopping after %.0fs", job_id, CLOSE_WAIT_S)
                    if not runs:
                        self.lanes[gpu_id].mode = None
                    return True
        return False

    def close(self) -> None:
        """Stop every running life (each releases its GPU: trainers killed, the mode undone) and give
        every GPU back (MPS daemons stopped, leases removed); whatever fails, the rest is still released."""
        lives = [run.life for runs in self._runs.values() for run in runs if run.life is not None]
        try:
            for lane in self.lanes.values():
                lane.lane.cancel.set()
            for life in lives:
                life.cancel.set()
            deadline = time.monotonic() + CLOSE_WAIT_S
            for life in lives:
                if not life.done.wait(max(0.0, deadline - time.monotonic())):
                    log.warning(
                        "cell=%s still running after %.0fs: its GPU is released under it",
                        life.cell.cell_id,
                        CLOSE_WAIT_S,
                    )
        finally:
            for gpu_id, lane in self.lanes.items():
                self._runs[gpu_id] = []
                try:
                    close_lane(lane)
                except Exception:  # the other GPUs are still given back
                    log.exception("gpu=%s not given back", gpu_id)
            for board in {id(lane.lane.board): lane.lane.board for lane in self.lanes.values()}.values():
                board.close()

    # --- internals -----------------------------------------------------------------------------
    def _lose_nodes(self, now: float, force: bool) -> list[Report]:
        """The lanes of lost nodes leave the runner (leases removed, idle actors killed); their attempts are
        reported ``lost`` (re-queued, not counted as failures) and recorded as ``node lost``."""
        gone = self.nodes.lost(self.lanes.values(), now, force)
        reports: list[Report] = []
        for gpu_id, lane in [(g, lane) for g, lane in self.lanes.items() if lane.node_id in gone]:
            runs = self._runs.pop(gpu_id)
            del self.lanes[gpu_id]
            for run in runs:  # its life's calls fail with the node's actors: it ends unread
                co = tuple(sorted(run.co))
                reports.append(Report(run.job_id, run.attempt, "lost", now, co))
                row = AttemptRow(
                    run.job_id,
                    run.attempt,
                    "node lost",
                    gpu_id,
                    run.mode,
                    run.start_s,
                    now,
                    run.estimate_mib,
                    None,
                    None,
                    ",".join(co),
                    f"node {lane.node_id[:8]} lost",
                )
                self.attempts.append(row)
            leave(lane)
            jobs = ", ".join(r.job_id for r in runs) or "none"
            log.error("node=%s lost: gpu=%s leaves the queue; its jobs re-queued: %s", lane.node_id[:8], gpu_id, jobs)
        return reports

    def _settle(self, lane: QueueLane, run: _Run, now: float) -> Report:
        states, why = run.life.states() if run.life is not None else ([], "never started")
        kind = _outcome(states, why)
        if kind == "lost":
            self.failures[run.job_id] += 1
            log.error("job=%s attempt=%d failed: %s", run.job_id, run.attempt, why)
        runs = self._runs[lane.gpu_id]
        runs.remove(run)
        if not runs:
            lane.mode = None  # the GPU emptied: its last job's release undid the mode (its daemon stopped)
        peak, rate = measured(states)
        co = ",".join(sorted(run.co))
        row = AttemptRow(
            run.job_id,
            run.attempt,
            kind,
            lane.gpu_id,
            run.mode,
            run.start_s,
            now,
            run.estimate_mib,
            peak,
            rate,
            co,
            None if kind == "ended" else why,
        )
        self.attempts.append(row)
        return Report(run.job_id, run.attempt, kind, now, tuple(sorted(run.co)), peak, rate)

    def _sample(self, now: float) -> None:
        due = [lane for lane in self.lanes.values() if lane.sampled_at is None or now - lane.sampled_at >= SAMPLE_S]
        refs = [lane.steward.gpu_now.remote(lane.gpu.uuid) for lane in due]  # every GPU asked at once
        for lane, ref in zip(due, refs, strict=True):
            try:
                sample = ray.get(ref, timeout=30)
            except ray.exceptions.RayError as exc:
                log.warning("gpu=%s not sampled: %s", lane.gpu_id, str(exc).splitlines()[0][:300])
                continue
            if lane.sampled_at is not None and lane.sample is not None and lane.sample.power_w is not None:
                self.energy_j += lane.sample.power_w * (now - lane.sampled_at)  # power held since the last read
            lane.sample, lane.sampled_at = sample, now
            sm = sample.sm_active if sample.sm_active is not None else sample.util  # GPM's, else NVML's
            lane.history.append((now, sm, sample.sm_occupancy, sample.dram_active))
            while lane.history and lane.history[0][0] < now - MONITOR_WINDOW_S:
                lane.history.popleft()
            runs = self._runs[lane.gpu_id]
            power = sample.power_w or 0.0
            row = TelemetryRow(now, lane.gpu_id, lane.mode or "-", len(runs), sm, power, sample.mem_used_mib)
            self.telemetry.append(row)

    def _view(self, lane: QueueLane, now: float) -> GpuView:
        runs = self._runs[lane.gpu_id]
        total = lane.sample.mem_total_mib if lane.sample and lane.sample.mem_total_mib else float(lane.gpu.memory_mib)
        used = lane.sample.mem_used_mib if lane.sample else 0.0
        mem = max(used, sum(r.estimate_mib for r in runs)) if len(runs) < POOL_SIZE else total
        sm, occ, dram = (_mean([h[k] for h in lane.history]) for k in (1, 2, 3))
        if (occ is None or dram is None) and runs and lane.mode is not None:
            outlook = self.predictor.outlook(lane.mode, [r.profile for r in runs])  # no GPM: the model's
            occ, dram = outlook.sm_occupancy, outlook.dram_active
        residents = tuple(Resident(r.job_id, r.profile, r.estimate_mib, r.max_slowdown) for r in runs)
        return GpuView(
            lane.gpu_id, total, lane.mode, residents, mem, sm or 0.0, occ or 0.0, dram or 0.0, lane.last_placed_s
        )


def _finished(run: _Run) -> bool:
    return run.life is not None and run.life.done.is_set()


def _mean(values: list[float | None]) -> float | None:
    """The mean of a window's readings; None if it has none (a GPU without GPM)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
