"""The life of a cell's training jobs on a leased GPU: bind, start, set-up, epochs, finish, release.

One life serves a sweep's cell (its jobs, a barrier between warm-up and the measured epochs) and a
queued job (a cell of one job joining a GPU other jobs live on: :mod:`raycolloc.queue.rayrunners` lives
each attempt on a thread of its own and polls for the ones that ended). The protocol (DESIGN.md, "Data
flow of one cell"), on a GPU its lane (:mod:`raycolloc.driver.lane`) already holds:

1. the cell joins the lane's residents and the node's steward binds its jobs to the GPU through the
   mode (the residents it joins named: a daemon the first resident started serves them all),
2. trainer actors start their training processes and build their workloads (``trainer.setup_timeout_s``),
3. warm-up epoch, then a barrier (waiting for every job's warm-up),
4. the measured epochs run together while the steward samples the GPU; a job silent for longer than
   its stall limit is ``hang`` (:class:`~raycolloc.driver.stall.StallWatch`), each call's epochs are
   capped by ``trainer.epoch_timeout_s``, and a dead trainer is an ``error``: rows, never exceptions,
5. release in ``finally`` (also on error, OOM, dead actor, Ctrl-C): trainers killed, the mode
   undone (the GPU's daemon stopped when its last resident leaves, unless kept), telemetry collected.

The caller turns the :class:`~raycolloc.driver.tabulate.CellRecord` into rows (a sweep) or an attempt's
outcome (the queue).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raycolloc.driver.lane import Lane
from raycolloc.driver.stall import StallWatch
from raycolloc.driver.tabulate import CellRecord
from raycolloc.procs import format_cpus
from raycolloc.spec import Binding, CellSpec, JobSpec, JobState, Samples

__all__ = ["CellCancelled", "run_cell"]

log = logging.getLogger(__name__)
POLL_S = 2.0  # how often a wait looks at the cancel flag and redraws progress


class CellCancelled(Exception):
    """The sweep (Ctrl-C) or the queue (its end) stopped while this cell lived; it writes no result."""


def _gather(
    refs: dict[int, Any], timeout: float | None, cancel: threading.Event, watch: StallWatch | None = None
) -> dict[int, JobState]:
    """Wait for one call per job; a dead actor becomes an error state, a job that stops progressing
    (``watch``) a hang state, for that job only (``timeout``: an overall cap, or None).

    Raises:
        CellCancelled: the sweep was interrupted while waiting.
    """
    states: dict[int, JobState] = {}
    deadline = time.monotonic() + timeout if timeout else math.inf
    pending = dict(refs)
    while pending and time.monotonic() < deadline:
        if cancel.is_set():
            raise CellCancelled
        ready, _ = ray.wait(
            list(pending.values()), num_returns=len(pending), timeout=min(POLL_S, max(0.0, deadline - time.monotonic()))
        )
        pending = {i: ref for i, ref in pending.items() if ref not in ready}
        if watch is not None and pending:
            for index, why in watch.hung(pending).items():
                log.error("cell=%s job=%d %s", watch.cell.cell_id, index, why)
                states[index] = JobState().failed("hang", why)
                del pending[index]  # the cell goes on; the trainer is killed when the cell ends
    for index, ref in refs.items():
        if index in states:
            continue
        if index in pending:
            states[index] = JobState().failed("error", f"timed out after {timeout:g}s")
            continue
        try:
            states[index] = ray.get(ref, timeout=10)
        except ray.exceptions.RayActorError as exc:
            states[index] = JobState().failed("error", f"trainer process died: {exc}".splitlines()[0][:2000])
        except Exception as exc:  # noqa: BLE001
            states[index] = JobState().failed("error", f"{type(exc).__name__}: {exc}"[:2000])
    return states


_NOT_PINNED_SAID: set[str] = set()  # the sweeps (Board.sweep) told that some cell's jobs are not pinned


def _say_not_pinned(cell: CellSpec, bindings: list[Binding], sweep: str) -> None:
    """Warn, once per sweep, that a cell's jobs asked for cores of their own and got none (its node
    has too few free cores: the scheduler shares them); each such cell's is at DEBUG."""
    wanted = {job.index for job in cell.jobs if job.trainer.cpu_affinity == "auto"}
    loose = [b.job_index for b in bindings if b.job_index in wanted and not b.cpus]
    if not loose:
        return
    if sweep in _NOT_PINNED_SAID:
        log.debug("cell=%s jobs_not_pinned=%d", cell.cell_id, len(loose))
        return
    _NOT_PINNED_SAID.add(sweep)
    log.warning(
        "cell=%s jobs_not_pinned=%d: not pinned, the node has too few free cores for one per job "
        "(trainer.cpu_affinity=auto) and the scheduler shares them; said once per sweep, for this cell and later ones",
        cell.cell_id,
        len(loose),
    )


class _CellRun:
    def __init__(self, cell: CellSpec, lane: Lane, rec: CellRecord) -> None:
        self.cell, self.lane, self.rec = cell, lane, rec
        self.trainers: dict[int, Any] = {}  # job index -> its trainer actor, borrowed from the lane
        self.prepared = False

    def run(self) -> None:
        cell, lane, rec = self.cell, self.lane, self.rec
        trainer_cfg = cell.config.trainer
        lane.report(cell.cell_id, "preparing")
        t_prepare = time.perf_counter()
        # One life binds at a time on a lane: the residents it names are every one bound before it, so the
        # steward takes none of them for stale (a queue's lives start together on their threads).
        with lane.binding:
            beside = lane.join(cell.cell_id)
            bindings = ray.get(lane.steward.prepare.remote(cell, lane.gpu.uuid, beside), timeout=300)
        self.prepared = True
        rec.reserved_cpus = format_cpus(bindings[0].reserved_cpus) if bindings else None
        _say_not_pinned(cell, bindings, lane.board.sweep)
        t_setup = time.perf_counter()
        rec.prepare_s = t_setup - t_prepare  # steward: MPS daemon or MIG layout, CPU cores
        forkserver = lane.forkserver if trainer_cfg.spawn == "fork" else None
        actors = lane.trainers.borrow(cell)
        for job, binding, actor in zip(cell.jobs, bindings, actors, strict=True):
            self.trainers[job.index] = actor
            actor.start.remote(job, binding, lane.board, forkserver)  # its setup waits for it
        lane.report(cell.cell_id, "setup")
        rec.states = _gather(
            {i: t.setup.remote() for i, t in self.trainers.items()}, trainer_cfg.setup_timeout_s, lane.cancel
        )
        rec.setup_s = time.perf_counter() - t_setup
        pids = {s.info.pid: i for i, s in rec.states.items() if s.info.pid}
        t_sampler = time.perf_counter()
        rec.telemetry_source = ray.get(lane.steward.start_sampling.remote(cell.cell_id, pids), timeout=60)
        rec.sampler_start_s = time.perf_counter() - t_sampler
        if cell.mix_name is not None or cell.scripted:
            # Mixed cells: every job trains its own epochs to completion from a common start, as the
            # study's mixed workloads did; no barrier holds a fast job back for a slow one. Scripts
            # run as written: they have no warm-up to wait for.
            lane.report(cell.cell_id, "training")
            self._measured(lambda job: (1, job.epochs))
            return
        # Warm-up epoch (1) on every live job; waiting for all of them is the barrier after which
        # the measured epochs start together, so they overlap on the GPU.
        lane.report(cell.cell_id, "warm-up")
        self._epochs(lambda job: (1, 1))
        self._measured(lambda job: (2, job.epochs))

    def _measured(self, span: Callable[[JobSpec], tuple[int, int]]) -> None:
        """The measured epochs inside the cell's measured window (alone on its node with
        ``cluster.isolate_measurement``: the wait is after the warm-up barrier)."""
        cell, lane, isolate = self.cell, self.lane, self.cell.config.cluster.isolate_measurement

        def waiting() -> None:
            if lane.cancel.is_set():
                raise CellCancelled

        if isolate:
            lane.report(cell.cell_id, "waiting to measure")
        with lane.windows.measuring(lane.node_id, cell.cell_id, isolate, waiting) as window:
            lane.report(cell.cell_id, "measuring")
            inject = bool(cell.config.cluster.sim_inject)  # noise into the measured window (simulated GPUs)
            if inject:
                ray.get(lane.steward.measuring.remote(cell.cell_id), timeout=60)
            try:
                self._epochs(span)
            finally:
                if inject:  # stopped inside the window: an isolated node's next cell measures without it
                    ray.get(lane.steward.measured.remote(cell.cell_id), timeout=60)
        self.rec.isolated, self.rec.overlapping_cells = isolate, window.overlapping
        if window.waited_s > 1.0:
            log.info("cell=%s waited %.1fs for its node's other cells to measure", cell.cell_id, window.waited_s)

    def _live(self) -> list[int]:
        return [i for i, s in self.rec.states.items() if s.ok]

    def _epochs(self, span: Callable[[JobSpec], tuple[int, int]]) -> None:
        live = self._live()
        if not live:
            return
        jobs = {j.index: j for j in self.cell.jobs}
        refs = {i: self.trainers[i].run_epochs.remote(*span(jobs[i])) for i in live}
        # Scripts report progress only where they print epoch lines: their silence proves nothing, and
        # only trainer.epoch_timeout_s bounds them.
        watch = (
            None
            if self.cell.scripted
            else StallWatch(self.lane.board, self.cell, self.rec.states, warmup=span(jobs[live[0]])[0] == 1)
        )
        for i, state in _gather(refs, self.cell.config.trainer.epoch_timeout_s, self.lane.cancel, watch).items():
            # A dead or hung trainer returns nothing: keep what it reported before (pid, MIG device,
            # warm-up epoch), so its row still says where and how far it ran.
            before = self.rec.states[i]
            if not state.info.pid:
                state.info = before.info
            if not state.epochs:
                state.epochs = before.epochs
            self.rec.states[i] = state

    def finish(self, interrupted: bool) -> None:
        """Collect final job records, stop sampling, kill trainers, release the GPU.

        An interrupted cell writes no result, and its trainers may still be inside an epoch: a call
        to them would wait behind it (one call at a time), so they are killed without being asked.
        """
        finished: list[int] = []
        try:
            live = [] if interrupted else self._live()
            if live:
                # The final record adds what is known at the end (NVML memory); if a trainer cannot
                # give it, the job keeps the state it already reported.
                finals = _gather({i: self.trainers[i].finish.remote() for i in live}, 60, threading.Event())
                self.rec.states.update({i: final for i, final in finals.items() if final.ok})
                finished = [i for i, final in finals.items() if final.ok]
            if self.prepared:
                try:
                    samples: Samples = ray.get(self.lane.steward.stop_sampling.remote(self.cell.cell_id), timeout=120)
                    self.rec.telemetry = list(samples.rows)
                except Exception as exc:  # noqa: BLE001
                    first = (str(exc).splitlines() or [""])[0][:300]  # a dead steward's error runs to many lines
                    log.warning("cell=%s telemetry lost: %s", self.cell.cell_id, first)
        finally:
            # Even when a second Ctrl-C lands in the steps above: trainers whose job ended cleanly go
            # back to the lane, the others are killed (their training processes die with them), and
            # the mode is undone (MIG layout restored) so the GPU is ready for the lane's next cell.
            self.lane.trainers.give_back(
                self.cell,
                [self.trainers[i] for i in finished],
                [t for i, t in self.trainers.items() if i not in finished],
            )
            if self.prepared:
                ray.get(self.lane.steward.release.remote(self.cell.cell_id), timeout=120)


def run_cell(
    cell: CellSpec, lane: Lane, started_at: float, lease_wait_s: float = 0.0, lane_setup_s: float = 0.0
) -> CellRecord:
    """Run one cell on the lane's GPU; failures become the record's status, never exceptions.

    Raises:
        CellCancelled: the sweep was interrupted; the GPU was released and no record is kept.
    """
    rec = CellRecord(
        cell,
        gpu=lane.gpu,
        node_id=lane.node_id,
        backend=lane.gpu.backend,
        started_at=started_at,
        lease_wait_s=lease_wait_s,
        lane_setup_s=lane_setup_s,
    )
    run = _CellRun(cell, lane, rec)
    interrupted = False
    try:
        run.run()
    except (CellCancelled, KeyboardInterrupt):
        interrupted = True
        raise
    except Exception as exc:  # noqa: BLE001 - a cell that cannot succeed is a result
        cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None else exc
        log.error("cell=%s failed: %s: %s", cell.cell_id, type(cause).__name__, cause)
        rec.status, rec.reason = "error", f"{type(cause).__name__}: {cause}"[:4000]
    finally:
        t0 = time.perf_counter()
        try:
            run.finish(interrupted)
        except ray.exceptions.RayActorError as exc:
            # The steward died (killed, or its node lost): no traceback, one line. What it held (the MPS
            # daemon, a MIG layout) outlives it; the sweep's end or the node's next steward stops it.
            why = (str(exc).splitlines() or [""])[0][:300]
            log.error(
                "cell=%s release failed: the node's steward died (%s); its MPS daemon and MIG layout are put "
                "right when the sweep ends or by the node's next steward",
                cell.cell_id,
                why,
            )
            rec.reason = (rec.reason or "") + f"; release failed: the node's steward died ({why})"
        except Exception as exc:
            log.exception("cell=%s release failed", cell.cell_id)
            rec.reason = (rec.reason or "") + f"; release failed: {exc}"
        finally:
            lane.leave(cell.cell_id)
        rec.teardown_s = time.perf_counter() - t0
    return rec
