"""Run validated cells on the cluster's GPUs: the one path every cell takes.

Every entry's sweep plan ends here (:func:`raycolloc.driver.plan.run`, which holds the output
directory: ``driver/outlock.py``) with a list of :class:`~raycolloc.spec.CellSpec` and the directory
each cell's result goes to. In order:

1. resume: a cell with a valid result (in this sweep's directory, under ``out_dir``, or in an earlier
   sweep's directory that ``out_dir``'s index lists: ``results/index.py``) is referenced, not run again;
2. connect to Ray, start every GPU node's steward, check the cells against the cluster: a config
   that fits no node is refused (``ConfigError``), a cell the cluster cannot run is a ``skipped``
   row, a cell whose jobs' memory estimate exceeds every GPU an ``unfit`` row;
3. one *lane* per GPU the sweep may use (``cluster.max_concurrent_cells`` fewer): a driver thread
   that leases one whole GPU once and runs cells on it one after the other, largest first; a cell
   *pinned* to a GPU index (a radT plan's ``Devices``) runs only in a lane whose GPU has that index
   on its node, so then every GPU gets a lane, and a lane with no cell for its GPU ends at once
   (inside :func:`~raycolloc.driver.kept_lanes.lanes_kept`, a sweep of one lane keeps it for the next);
4. each finished cell's rows are written at once (atomically), so a later crash loses nothing.

Ctrl-C (and SIGTERM: :mod:`raycolloc.driver.signals`) sets a flag every lane polls: running cells
kill their trainers, release their GPU and write nothing (a re-run resumes them); the lanes end their
leases. A result that cannot be written (disk full) does the same to the cells still running, and
:func:`run_cells` raises :class:`~raycolloc.results.store.ResultWriteError`: the cells written
before are intact.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
import ray

from raycolloc.driver.cell_run import CellCancelled, run_cell
from raycolloc.driver.cluster import connect
from raycolloc.driver.kept_lanes import KeptLanes, kept_for_sweep
from raycolloc.driver.lane import Lane, LaneShape, close_lane, open_lane
from raycolloc.driver.lease import LeaseError
from raycolloc.driver.preflight import check_cluster, check_nodes, gpu_nodes, unfit_cells
from raycolloc.driver.progress import Board, ProgressView, open_board
from raycolloc.driver.regrow import Growth, Regrow
from raycolloc.driver.repeats import is_solo
from raycolloc.driver.resume import CellResult, resume
from raycolloc.driver.side_by_side import MeasureWindows
from raycolloc.driver.summary import cell_summary
from raycolloc.driver.tabulate import CellRecord, cell_row, job_rows
from raycolloc.driver.teardown import note_pipe_root
from raycolloc.driver.trainers import TrainerPool
from raycolloc.mode_kinds import mode_rank
from raycolloc.node.reserve import confine_process, widen
from raycolloc.node.steward_handles import NAMESPACE, start_stewards, warm_forkservers
from raycolloc.results.index import REFERENCE, register_sweeps, sweep_root
from raycolloc.results.rows import CellRow
from raycolloc.results.store import ResultWriteError, write_cell
from raycolloc.spec import CellSpec, CellStatus, as_cell_status

__all__ = ["CellResult", "run_cells", "time_share"]

log = logging.getLogger("raycolloc")


def cell_size(cell: CellSpec) -> tuple[int, int]:
    """Sort key, largest cell first (LPT scheduling): with more cells than GPUs this keeps a long
    cell from starting last and stretching the sweep.

    Size is the samples to train, summed over the cell's jobs. Of two cells with as many samples,
    the one of the lower mode (:func:`~raycolloc.mode_kinds.mode_rank`) comes first. Naive is lowest:
    time-slicing's aggregate throughput barely grows with the degree, so it runs longest (4 x H200,
    resnet26, 51,200 samples a job: naive x7 31.5 s against MPS x7 21.0 s alone).
    """
    samples = sum(j.epoch_samples * j.epochs for j in cell.jobs)
    return -samples, mode_rank(cell.mode)


def _record(rec: CellRecord, cell_dir: Path) -> CellResult:
    """Write a cell's rows into its directory; returns how it ended."""
    jobs, epochs = job_rows(rec)
    row = cell_row(rec, jobs, epochs)
    write_cell(cell_dir, {"cells": [row], "jobs": jobs, "epochs": epochs, "telemetry": rec.telemetry})
    (cell_dir / REFERENCE).unlink(missing_ok=True)  # a run replaces a reference (+rerun=true)
    return CellResult(rec.cell, cell_dir, as_cell_status(row.status), cell_summary(row, jobs), row=row)


_LANE_NUMBERS = itertools.count()  # the lanes' numbers in their leases' and trainers' names


class _Sweep:
    """The shared state of one :func:`run_cells` call: the queue, the lanes and the results."""

    def __init__(
        self,
        todo: list[tuple[CellSpec, Path]],
        board: Board,
        view: ProgressView,
        pins: Mapping[str, int],
        regrow: Regrow | None = None,
        kept: KeptLanes | None = None,
    ) -> None:
        # Repeats interleaved (every cell's repeat 0, then every repeat 1, ...), largest first within each;
        # repeats=auto: the solo baselines first (their first run at the sweep's start), and the runs
        # it adds in the order it adds them.
        self.queue = sorted(todo, key=lambda item: (item[0].config.repeat, *cell_size(item[0])))
        if regrow is not None:
            self.queue = sorted(
                todo, key=lambda item: (item[0].config.repeat > 0, not is_solo(item[0]), *cell_size(item[0]))
            )
        self.board, self.view, self.pins, self.regrow = board, view, pins, regrow
        self.cancel = threading.Event()
        self.lock = threading.Condition()
        self.running = 0  # cells taken and not finished: with repeats=auto each may add more
        self.results: dict[str, CellResult] = {}
        self.finished: list[threading.Event] = []
        self.lease_errors: list[str] = []
        self.windows = MeasureWindows()
        self.write_error: ResultWriteError | None = None
        first = todo[0][0].config
        self.cluster, self.pipe_root = first.cluster, first.mode.pipe_root
        self.lease_cpus = max(max(c.config.trainer.num_cpus * c.degree, 1.0) for c, _ in todo)
        self.pool_size = max(c.degree for c, _ in todo)  # a lane's trainers: enough for its largest cell
        self.trainer_cpus = max(c.config.trainer.num_cpus for c, _ in todo)
        # Inside lanes_kept (the advisor), a one-lane sweep's lane: sized for the process's largest cell, kept.
        self.kept = kept
        if self.kept is not None:
            self.pool_size = self.kept.pool_size(self.pool_size, self.trainer_cpus)
            self.lease_cpus = max(self.lease_cpus, self.trainer_cpus * self.pool_size)

    def next_cell(self, gpu_index: int, take: bool = True) -> tuple[CellSpec, Path] | None:
        """The next cell this lane's GPU may run (``take=False``: only look)."""
        with self.lock:
            while not self.cancel.is_set():
                for i, (cell, _) in enumerate(self.queue):
                    if self.pins.get(cell.cell_id, gpu_index) == gpu_index:
                        if not take:
                            return self.queue[i]
                        self.running += 1
                        return self.queue.pop(i)
                # A cell still running may add repeats (repeats=auto): a lane waits for it before it ends.
                if not take or self.regrow is None or self.running == 0:
                    return None
                self.lock.wait(timeout=0.5)
            return None

    def done(self) -> None:
        """A taken cell ended (recorded, or not): a lane waiting for more may look again."""
        with self.lock:
            self.running -= 1
            self.lock.notify_all()

    def grow(self, growth: Growth) -> None:
        """Cells repeats=auto added: shown on the board, then queued (the reused ones are results)."""
        for result in growth.reused:
            self.results[result.cell.cell_id] = result
            self.view.write(result.summary)
        added = [*growth.front, *growth.back]
        self.view.add([c for c, _ in added], [r.cell for r in growth.reused])
        with self.lock:
            self.queue[:0] = growth.front
            self.queue.extend(growth.back)
            self.lock.notify_all()

    def finish(self, cell_dir: Path, rec: CellRecord) -> None:
        try:
            result = self.results[rec.cell.cell_id] = _record(rec, cell_dir)
        except ResultWriteError as exc:
            # Nothing more can be kept: the running cells stop as on Ctrl-C, writing nothing.
            log.error("%s; stopping the sweep", exc)
            self.write_error = self.write_error or exc
            self.cancel.set()
            raise CellCancelled from exc
        self.board.cell(rec.cell.cell_id, "done", result.status)
        self.view.write(result.summary)
        if self.regrow is not None:
            self.grow(self.regrow.expand([result]))

    def lane(self, index: int) -> None:
        """Lease one GPU and run cells on it until the queue is empty; says so when it ends."""
        try:
            self._lane(index)
        finally:
            self.finished[index].set()

    def _lane(self, index: int) -> None:
        lane: Lane | None = None
        # The lane ran out of cells (not cancelled, nothing raised), and each it ran ended ok: it may be kept.
        ended, healthy = False, True
        try:
            while True:
                started_at, waits = time.time(), dict[str, float]()
                if lane is None:
                    opened = self._open(index)
                    if opened is None:
                        return
                    lane, waits, kept_since, shape = opened
                    started_at = kept_since or started_at  # a kept lane's wait for this sweep is GPU time too
                    if self.next_cell(lane.gpu.index, take=False) is None:
                        return  # every cell left is pinned to another GPU: this one goes back at once
                item = self.next_cell(lane.gpu.index)
                if item is None:
                    ended = True
                    return
                cell, cell_dir = item
                # A lane's first cell waited for the GPU and the lane's set-up (its wall time includes
                # both); the lane's next cells find the GPU held and wait for nothing.
                try:
                    self.finish(cell_dir, run_cell(cell, lane, started_at, **waits))
                    healthy = healthy and self.results[cell.cell_id].status == "ok"
                finally:
                    self.done()
                if not self.cluster.reuse_lease:  # a lease per cell, as before lanes kept theirs
                    close_lane(lane)
                    lane = None
        except CellCancelled:
            log.warning("lane=%d interrupted: its cell released the GPU and wrote nothing", index)
        finally:
            if lane is not None and self.kept is not None and ended and healthy and not self.cancel.is_set():
                self.kept.keep(lane, shape, self.cluster, self.pipe_root)
            elif lane is not None:
                close_lane(lane)

    def _open(self, index: int) -> tuple[Lane, dict[str, float], float | None, LaneShape] | None:
        """Lease a GPU and get the lane ready on it (:func:`~raycolloc.driver.lane.open_lane`); None if
        that cannot be had (the reason is kept for the cells no lane could run)."""

        def waiting(waited: float) -> None:
            if self.cancel.is_set():
                raise CellCancelled
            log.debug("lane=%d waiting for a GPU (%.0fs)", index, waited)

        with self.lock:
            forks = any(c.config.trainer.spawn == "fork" for c, _ in self.queue)
            pooled = any(TrainerPool.pooled(c) for c, _ in self.queue)
        number = next(_LANE_NUMBERS)  # unique in the process: a kept lane lives on beside a later sweep's
        name = f"raycolloc:lane:{os.getpid()}:{number}"
        shape = LaneShape(name, number, self.lease_cpus, self.pool_size, self.trainer_cpus, forks, pooled)
        if self.kept is not None:
            taken = self.kept.take(shape, self.cluster, self.pipe_root, self.board, self.windows, self.cancel)
            if taken is not None:
                lane, since, shape = taken
                return lane, {"lease_wait_s": 0.0, "lane_setup_s": time.time() - since}, since, shape
        try:
            lane, setup_s = open_lane(
                shape, self.cluster, self.pipe_root, self.board, self.cancel, self.windows, on_wait=waiting
            )
        except LeaseError as exc:  # none granted, or its node cannot serve (LaneError): other lanes run its cells
            self.lease_errors.append(str(exc))
            return None
        return lane, {"lease_wait_s": lane.lease.waited_s, "lane_setup_s": setup_s}, None, shape


def _skip(cell: CellSpec, cell_dir: Path, reason: str, status: CellStatus = "skipped") -> CellResult:
    """A cell that never started: ``skipped`` (the cluster cannot run it) or ``unfit`` (too big)."""
    return _record(CellRecord(cell, status=status, reason=reason, backend=cell.config.cluster.backend), cell_dir)


def run_cells(
    cells: list[tuple[CellSpec, Path]],
    rerun: bool = False,
    pins: Mapping[str, int] | None = None,
    place: Callable[[CellSpec], Path] | None = None,
) -> list[CellResult]:
    """Run (or reuse) every cell; returns one result per cell, in the order given, then one per
    cell ``repeats=auto`` added (``place``: an added cell's directory; None: nothing is added).

    ``pins`` maps a cell's id to the index (on its node) of the GPU it must run on; other cells run
    on any free GPU. A pinned cell no node has the GPU for is a ``skipped`` row.

    The caller holds the output directory (:func:`raycolloc.driver.plan.run`).

    Raises:
        ConfigError: a cell fits no node or GPU of the cluster (nothing has run).
        ResultWriteError: a result could not be written; the running cells stopped, the cells
            written before are intact.
        KeyboardInterrupt: Ctrl-C (or :class:`~raycolloc.driver.signals.Terminated`, SIGTERM, where the
            command line took the signals); running cells released their GPUs and wrote nothing.
    """
    todo, reused = resume(cells, rerun)
    regrow = Regrow([c for c, _ in cells], place, rerun) if place is not None else None
    if regrow is not None and not regrow.policy.active:
        regrow = None
    if regrow is not None:  # reused runs count: they may bring repeats already
        growth = regrow.expand(reused)
        todo, reused = [*growth.front, *todo, *growth.back], [*reused, *growth.reused]
    for result in reused:
        print(result.summary, flush=True)
    results = {r.cell.cell_id: r for r in reused}
    if todo:
        cores = os.sched_getaffinity(0)
        try:
            results.update(_run(todo, pins or {}, regrow))
        finally:
            widen(os.getpid(), cores)  # a driver kept to its node's reserved cores gets its own back
    if regrow is not None:
        print(regrow.summary(), flush=True)
    ordered = [results.pop(c.cell_id) for c, _ in cells if c.cell_id in results]
    return ordered + list(results.values())


def _pin_skips(todo: list[tuple[CellSpec, Path]], pins: Mapping[str, int], nodes: Mapping[str, int]) -> dict[str, str]:
    """Why each cell pinned to a GPU index no node has cannot run."""
    most = max(nodes.values(), default=0)
    return {
        c.cell_id: f"pinned to GPU {pins[c.cell_id]} (the plan's Devices), and no node of the cluster has a GPU "
        f"{pins[c.cell_id]} (the largest has {most}: GPU 0-{most - 1}); +plan_fanout=true runs it on any free GPU"
        for c, _ in todo
        if pins.get(c.cell_id, 0) >= most
    }


def _run(todo: list[tuple[CellSpec, Path]], pins: Mapping[str, int], regrow: Regrow | None) -> dict[str, CellResult]:
    first = todo[0][0].config
    for root in {c.config.mode.pipe_root for c, _ in todo}:
        note_pipe_root(root)  # what a steward that dies during the sweep leaves there is put right at its end
    connect(first.cluster, max_jobs_per_cell=max(c.degree for c, _ in todo))
    nodes = gpu_nodes()
    infos = start_stewards(nodes, first.cluster, first.mode.pipe_root)
    # Local mode: the driver runs on a GPU node, so it keeps to that node's reserved cores too.
    here = next((i.reservation.cores for i in infos if i.node_id == ray.get_runtime_context().get_node_id()), ())
    confine_process(os.getpid(), here)
    skips = check_cluster([c for c, _ in todo], infos)
    skips.update({k: v for k, v in _pin_skips(todo, pins, nodes).items() if k not in skips})
    check_nodes([c for c, _ in todo if c.cell_id not in skips], infos)
    unfit = unfit_cells([c for c, _ in todo], infos, skips)
    # Once the sweep is accepted (a refused one leaves no trace) and before any cell is written (so a
    # killed sweep's results are found too): out_dir's index learns where this sweep writes.
    for out_dir in sorted({c.config.out_dir for c, _ in todo}):
        register_sweeps(out_dir, [sweep_root(d for c, d in todo if c.config.out_dir == out_dir)])
    results = {c.cell_id: _skip(c, d, skips[c.cell_id]) for c, d in todo if c.cell_id in skips}
    results.update({c.cell_id: _skip(c, d, unfit[c.cell_id], "unfit") for c, d in todo if c.cell_id in unfit})
    for result in results.values():
        print(result.summary, flush=True)
    todo = [(c, d) for c, d in todo if c.cell_id not in results]
    if regrow is not None:  # a skipped or unfit cell is a finished one of the first pass
        growth = regrow.expand(list(results.values()))
        todo = [*growth.front, *todo, *growth.back]
        results.update({r.cell.cell_id: r for r in growth.reused})
    if not todo:
        return results
    if any(c.config.trainer.spawn == "fork" for c, _ in todo):  # torch's import before any GPU is held
        log.info(warm_forkservers({i.node_id: nodes[i.node_id] for i in infos}, first.cluster, first.mode.pipe_root))
    board = open_board(NAMESPACE)
    gpus = sum(nodes.values())
    # Pinned cells: a lane on every GPU, since a lease cannot ask for a GPU by index.
    lanes = gpus if pins else min(first.cluster.max_concurrent_cells or gpus, gpus, len(todo))
    view = ProgressView([c for c, _ in todo], board, lanes)
    kept = kept_for_sweep(lanes, first.cluster.reuse_lease, max((i.cpus for i in infos), default=0))
    sweep = _Sweep(todo, board, view, pins, regrow, kept)
    log.info("cells=%d lanes=%d gpus=%d", len(todo), lanes, gpus)
    sweep.finished = [threading.Event() for _ in range(lanes)]
    for i in range(lanes):
        threading.Thread(target=sweep.lane, args=(i,), name=f"raycolloc-lane-{i}").start()
    # Events, never Thread.join: a KeyboardInterrupt in join() corrupts a running thread's state (CPython 3.11).
    try:
        for done in sweep.finished:
            while not done.wait(timeout=view.every_s):  # returns the moment the lane ends (a poll would lag)
                view.refresh()
    except KeyboardInterrupt:
        log.warning(
            "interrupted: cancelling the running cells; each releases its GPU and writes nothing; a re-run resumes"
        )
        sweep.cancel.set()
        for done in sweep.finished:
            done.wait(timeout=first.trainer.setup_timeout_s)
        raise
    finally:
        view.refresh()
        view.close()
        board.close()
    results.update(sweep.results)
    if sweep.write_error is not None:
        raise sweep.write_error
    # From the command's start: Ray's start-up and the validation count too.
    wall = time.time() - psutil.Process().create_time()
    print(time_share([r.row for r in sweep.results.values() if r.row is not None], wall, lanes), flush=True)
    reason = "; ".join(dict.fromkeys(sweep.lease_errors)) or "no lane could run it"
    for cell, cell_dir in todo:
        if cell.cell_id not in results:  # every lane failed to lease a GPU
            rec = CellRecord(cell, status="error", reason=f"not run: {reason}", backend=first.cluster.backend)
            results[cell.cell_id] = _record(rec, cell_dir)
            print(results[cell.cell_id].summary, flush=True)
    return results


def time_share(rows: list[CellRow], wall_s: float, lanes: int) -> str:
    """Where the sweep's time went: measured epochs (their share of ``wall_s`` x the GPUs used),
    warm-up, and each cell's fixed cost (everything but its epochs)."""
    measured = sum(r.makespan_s or 0.0 for r in rows)
    epochs = sum(r.total_s or 0.0 for r in rows)
    fixed = sorted(r.fixed_s for r in rows if r.fixed_s is not None)
    median = fixed[len(fixed) // 2] if fixed else float("nan")
    gpu_s = max(wall_s * lanes, 1e-9)
    return (
        f"time: {wall_s:.1f} s on {lanes} GPU(s); measured epochs {measured:.1f} s = {100 * measured / gpu_s:.0f}% "
        f"of the GPU time, warm-up {epochs - measured:.1f} s, fixed cost per cell median {median:.1f} s "
        f"(sum {sum(fixed):.1f} s over {len(fixed)} cells)"
    )
