"""The node steward: one named actor per Ray node that owns GPU state and samples the GPUs.

It is the only process that touches a node's MPS daemons and MIG layouts, and the only one that
reads NVML for telemetry (it never initialises CUDA). It also keeps the node's warm parent of
training processes running (:mod:`raycolloc.job.forkserver`), which trainers ask for forks. For a cell
it ``prepare``s the GPU through the cell's mode (:data:`raycolloc.node.modes.registry.MODES`), which
returns one binding per job, gives each job cores of its own, samples the GPU while the cell measures,
and ``release``s the GPU, which the cell always asks for in ``finally``. It knows nothing of trainers or
progress: jobs are bound through their environment and report to the driver directly.

A GPU holds a set of *residents*: the cells prepared on it and not yet released (a sweep's cell alone,
or a queue's jobs, each a cell of one, side by side). A cell arriving names the residents it joins
(``beside``: none for a sweep's cell); any other resident is stale, left by a dead driver (Ray grants a
GPU's lease only after the previous holder's is gone), and is released first. Residents side by side are
of one mode, one whose jobs may join and leave (not MIG); the mode's ``release`` sees whether the GPU
emptied (MPS then stops its daemon, unless ``mode.keep_daemon`` keeps it for the lane's next cell).

What a dead steward left (its driver or Ray SIGKILLed, or the steward itself killed) is put right
when a steward starts: MPS daemons of its GPUs stopped, MIG layouts restored, directories removed
(:mod:`raycolloc.node.leftovers`, from records that survive SIGKILL). When a GPU's lease ends, its
directories under ``mode.pipe_root`` go with its daemon.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
import ray

from raycolloc.config import ClusterConfig
from raycolloc.devices import JobDevice
from raycolloc.gauges import GpuGauges
from raycolloc.mpsctl import CONTROL
from raycolloc.node.cpus import CpuPool
from raycolloc.node.gpu.backend import GpuBackend, GpuInfo
from raycolloc.node.gpu.sim_inject import Injector, injector_for
from raycolloc.node.leftovers import claim, clean_leftovers, find_leftovers
from raycolloc.node.modes.base import GpuSlot, Mode, check_joining
from raycolloc.node.modes.mig import MIG_RECORD
from raycolloc.node.modes.registry import MODES
from raycolloc.node.reserve import confine, plan_reservation, ray_processes, raylet_of, thread_siblings, widen
from raycolloc.node.steward_log import steward_logging
from raycolloc.node.telemetry import Sampler, gi_sm_shares, gpu_now, pick_source
from raycolloc.procs import cache_env, normal_priority, python_env
from raycolloc.spec import Binding, CellSpec, GpuNow, NodeInfo, Release, Reservation, Samples

__all__ = ["NAMESPACE", "RemoteSteward", "Steward", "node_key"]

log = logging.getLogger(__name__)
NAMESPACE = "raycolloc"


@dataclass
class _CellState:
    cell: CellSpec
    slot: GpuSlot
    mode: Mode
    bindings: list[Binding] = field(default_factory=list)
    sampler: Sampler | None = None
    injector: Injector | None = None  # cluster.sim_inject's noise, simulated GPUs only


def node_key(node_id: str) -> str:
    """A stable name of this node on its host: simulated GPUs keep their UUIDs across runs."""
    head = any(n["NodeID"] == node_id and "node:__internal_head__" in n["Resources"] for n in ray.nodes())
    return f"{socket.gethostname()}-{'0' if head else node_id[:12]}"


def _make_backend(node_id: str, cluster: ClusterConfig, num_gpus: int) -> GpuBackend:
    if cluster.backend == "nvml":
        from raycolloc.node.gpu.nvml import NvmlBackend

        return NvmlBackend()
    from raycolloc.node.gpu.sim import SimBackend

    return SimBackend(cluster.sim_root, node_key(node_id), num_gpus, cluster.gpu_model, cluster.sim_mig_mode)


class Steward:
    """See the module docstring. Created through :func:`get_steward`."""

    def __init__(self, node_id: str, cluster: ClusterConfig, num_gpus: int, pipe_root: str) -> None:
        self.log_path = steward_logging()  # INFO to a file in Ray's log directory, warnings to the console
        normal_priority()  # MPS daemons and servers it starts inherit its niceness
        self.node_id = node_id
        self.backend = _make_backend(node_id, cluster, num_gpus)
        self.pipe_root = Path(pipe_root)
        self.control = self.backend.mps_control(str(self.pipe_root), os.environ.get("RAYCOLLOC_MPS_CONTROL", CONTROL))
        self._lock = threading.RLock()
        self._slots: dict[str, GpuSlot] = {}  # gpu uuid -> its slot, kept from cell to cell
        self._cells: dict[str, _CellState] = {}
        self._gauges = GpuGauges()  # the dashboard's, made at the first row
        self._gpm_prev: dict[str, Any] = {}  # gpu uuid -> the GPM sample of its last gpu_now
        self._cpus = CpuPool()  # the cores Ray may use on this node, handed to jobs per cell
        self.reservation = Reservation()  # cores kept for the node's own processes (node/reserve.py)
        self._spawning = 0  # callers inside :meth:`spawning` (new workers start on every core meanwhile)
        self.leftovers = self._clean_leftovers()
        self._forkserver: subprocess.Popen[bytes] | None = None
        self._forkserver_path = str(self.pipe_root / f"forkserver-{os.getpid()}.sock")
        self._forkserver_log = self.pipe_root / f"forkserver-{os.getpid()}.log"
        self._start_forkserver()

    def _clean_leftovers(self) -> list[str]:
        """Stop daemons, restore MIG layouts and remove directories that dead stewards left on this
        node's GPUs; returns what was found (logged, and in :meth:`info`)."""
        found, in_use = find_leftovers(self.pipe_root, {g.uuid for g in self.backend.gpus()})
        for item in in_use:
            log.warning(
                "gpu_dir=%s in use by %s (another Ray instance on this host?): left alone",
                item.path,
                item.owner.describe(),
            )
        failed = clean_leftovers(found, lambda env: self.backend)
        for line in failed:
            log.error("leftover not cleaned: %s (python -m raycolloc.doctor reports it)", line)
        return [item.detail for item in found if item.kind != "directory"]

    def _start_forkserver(self) -> None:
        """Start the warm parent now: it imports torch (and timm for real GPUs) while the sweep leases."""
        self.pipe_root.mkdir(parents=True, exist_ok=True)
        # OMP_NUM_THREADS=1: importing torch with more starts an OpenMP thread, which forks would lose.
        env = python_env({**os.environ, "OMP_NUM_THREADS": "1"})
        cache_env(env)  # importing torch._dynamo makes inductor's cache directory: the node's compile cache's
        # It removes its socket and log when this steward ends (its parent-death signal is SIGTERM).
        with open(self._forkserver_log, "ab") as out:
            cmd = [sys.executable, "-m", "raycolloc.job.forkserver", self._forkserver_path, str(self._forkserver_log)]
            cmd += [] if self.backend.traits.trains_on_cpu else ["--timm"]
            self._forkserver = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)

    def forkserver(self, timeout: float = 120.0) -> str | None:
        """The fork server's socket once it serves (restarted if it died); None if it cannot start."""
        if self._forkserver is None or self._forkserver.poll() is not None:
            log.warning(
                "forkserver exited (%s): starting it again",
                None if self._forkserver is None else self._forkserver.returncode,
            )
            self._start_forkserver()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self._forkserver_path):
                return self._forkserver_path
            if self._forkserver is not None and self._forkserver.poll() is not None:
                break
            time.sleep(0.05)
        log.warning("forkserver did not come up (log: %s): training processes will be exec'd", self._forkserver_log)
        return None

    def __repr__(self) -> str:
        return f"Steward({self.node_id[:12]}:{self.backend.kind})"

    # --- discovery -----------------------------------------------------------------------
    def info(self, reserved_cpus: str | None = None) -> NodeInfo:
        """The node, its backend and its GPUs (used by the sweep's pre-flight checks), after keeping
        ``reserved_cpus`` for its own processes (:meth:`reserve`) where given."""
        if reserved_cpus is not None:
            self.reserve(reserved_cpus)
        mem = psutil.virtual_memory()
        return NodeInfo(
            node_id=self.node_id,
            pid=os.getpid(),
            gpus=tuple(self.backend.gpus()),
            driver=self.backend.driver_version(),
            cpus=len(self._cpus.cpus),
            mem_total_mib=mem.total / (1 << 20),
            mem_available_mib=mem.available / (1 << 20),
            leftovers=tuple(self.leftovers),
            traits=self.backend.traits,
            reservation=self.reservation,
        )

    def reserve(self, setting: str) -> Reservation:
        """Keep cores for the node's own processes (``cluster.reserved_cpus``), never a job's, and
        move every Ray process of the node there (again: new workers start on every core)."""
        with self._lock:
            was = self.reservation.cores
            if setting != self.reservation.setting:
                gpus = self.backend.gpus()
                near = self.backend.cpu_affinity(gpus[0].uuid) if gpus else None
                self.reservation = plan_reservation(setting, self._cpus.cpus, near, thread_siblings())
                self._cpus.reserve(self.reservation.cores)
                log.info("reserved_cpus=%s %s", list(self.reservation.cores), self.reservation.note)
            # Processes on an earlier sweep's reserved cores move to the new ones (or back to all).
            confine(self.reservation.cores, ray_processes(os.getpid()), was, self._cpus.cpus)
        return self.reservation

    def spawning(self, start: bool) -> bool:
        """Open (``start``) or close a window in which new Ray workers start on every core; returns
        whether the node keeps cores at all (without, there is nothing to open).

        A worker process inherits its raylet's cores, and the raylet is confined to the reserved ones:
        on one H200 (16 cores, 1 reserved) the 15 trainer actors a 16-job cell added started one after
        another on that core, their first jobs waiting 30-34 s where one worker takes ~2 s (2026-12-02,
        jobs/advise_cheap.sh; 16 plain actors outside a sweep: 0.4 s). Inside the window the raylet
        has every core again; closing the last window confines it and the workers it started."""
        with self._lock:
            if not self.reservation.cores:
                return False
            self._spawning = max(0, self._spawning + (1 if start else -1))
            raylet = raylet_of(os.getpid())
            if start and self._spawning == 1 and raylet is not None:
                widen(raylet, self._cpus.cpus)
            elif not start and self._spawning == 0:
                confine(self.reservation.cores, ray_processes(os.getpid()))
            return True

    def resolve_gpu(self, ray_gpu_id: str) -> GpuInfo:
        return self.backend.gpu_for_ray_id(ray_gpu_id)

    def job_env(self, gpu_uuid: str) -> dict[str, str]:
        """What a job on this GPU needs in its environment beyond its mode's binding (the simulated
        driver's device state); for tools that bind a job by hand, like ``jobs/bench_trainer.py``."""
        return self.backend.job_env(gpu_uuid)

    def job_device(self, gpu_uuid: str) -> JobDevice:
        """The device a job on this GPU calls (its binding's ``device``); for tools that bind by hand."""
        return self.backend.job_device(gpu_uuid)

    # --- prepare / release -----------------------------------------------------------------
    def prepare(self, cell: CellSpec, gpu_uuid: str, beside: Collection[str] = ()) -> list[Binding]:
        """Make the GPU ready for the cell's mode and return one binding per job; ``beside``: the
        residents it joins (others are stale: released first).

        Raises:
            ModeError: the GPU cannot be prepared, or take this cell beside its residents; nothing changed.
        """
        mode_cls = MODES[cell.mode]
        with self._lock:
            slot = self._slots.get(gpu_uuid)
            for stale in sorted((slot.residents if slot else set()) - set(beside) - {cell.cell_id}):
                log.warning("gpu=%s held by stale cell=%s: releasing it first", gpu_uuid, stale)
                self.release(stale)
            self.backend.expect_mig_mode(gpu_uuid, mode_cls.kind.partitioned)
            gpu = self.backend.gpu(gpu_uuid)
            if slot is None:
                slot = self._slots[gpu_uuid] = GpuSlot(self.backend, gpu, self.control)
            slot.gpu = gpu
            joined = slot.residents - {cell.cell_id}
            check_joining(mode_cls, gpu_uuid, {self._cells[c].mode.name for c in joined if c in self._cells})
            claim(slot.dir(cell))  # this steward uses the GPU's directory: not a leftover while it runs
            state = _CellState(cell, slot, mode_cls(slot, cell))
            self._cells[cell.cell_id] = state
            slot.residents.add(cell.cell_id)
        try:
            self.reserve(cell.config.cluster.reserved_cpus)
            with slot.lock:
                bindings = state.mode.prepare()
            env, device = self.backend.job_env(gpu_uuid), self.backend.job_device(gpu_uuid)
            bindings = [replace(b, env={**b.env, **env}, device=device) for b in bindings]
            state.bindings = self._pin_cpus(cell, gpu, bindings)
            return state.bindings
        except BaseException:
            self.release(cell.cell_id)
            raise

    def _pin_cpus(self, cell: CellSpec, gpu: GpuInfo, bindings: list[Binding]) -> list[Binding]:
        """Give each job with ``trainer.cpu_affinity=auto`` cores of its own (see raycolloc.node.cpus), and
        every job the node's reserved cores (its actor's place) and the others (an unpinned job's)."""
        if self.reservation.cores:
            kept, shared = self.reservation.cores, self._cpus.shared()
            bindings = [replace(b, reserved_cpus=kept, shared_cpus=shared) for b in bindings]
        wanted = [job for job in cell.jobs if job.trainer.cpu_affinity == "auto"]
        if not wanted:
            return bindings
        near = self.backend.cpu_affinity(gpu.uuid)
        with self._lock:
            picked = self._cpus.allocate(cell.cell_id, [job.trainer.num_cpus for job in wanted], near)
        if picked is None:
            return bindings
        cores = dict(zip([job.index for job in wanted], picked, strict=True))
        return [replace(b, cpus=cores[b.job_index]) if b.job_index in cores else b for b in bindings]

    def release(self, cell_id: str) -> Release:
        """Stop sampling and undo the cell's mode: the cell leaves its GPU (the mode sees whether the GPU
        emptied: node/modes/). Safe to call twice."""
        with self._lock:
            state = self._cells.pop(cell_id, None)
            if state is None:
                return Release(released=False)
            uuid = state.slot.gpu.uuid
            state.slot.residents.discard(cell_id)
            self._cpus.release(cell_id)
        if state.sampler is not None:
            state.sampler.stop()
        if state.injector is not None:
            state.injector.stop()
        try:
            with state.slot.lock:
                done = replace(state.mode.release(), released=True)
        except Exception as exc:  # noqa: BLE001 - report it; the GPU is free for the next cell either way
            done = Release(released=True, errors=(f"{state.mode.name}: {exc}",))
        if done.errors:
            log.warning("cell=%s gpu=%s %s", cell_id, uuid, done)
        else:  # all went well: nothing at INFO, once per cell on every sweep's console
            log.debug("cell=%s gpu=%s %s", cell_id, uuid, done)
        return done

    def release_gpu(self, gpu_uuid: str) -> Release:
        """The GPU's lease ends: its residents (a dead life's) leave, and its kept MPS daemon stops."""
        with self._lock:
            slot = self._slots.get(gpu_uuid)
            residents = sorted(slot.residents) if slot is not None else []
        done = Release()
        for cell_id in residents:
            done = self.release(cell_id)
        if slot is not None:
            with slot.lock:
                if slot.stop_daemon():
                    done = replace(done, mps_stopped=True)
        if slot is not None:
            for gpu_dir in list(slot.dirs):
                # A MIG layout that could not be restored keeps its record (and the directory) for
                # the next steward or the doctor.
                if not (gpu_dir / MIG_RECORD).exists():
                    shutil.rmtree(gpu_dir, ignore_errors=True)
                    slot.dirs.discard(gpu_dir)
        return done

    # --- telemetry -------------------------------------------------------------------------
    def gpu_now(self, gpu_uuid: str) -> GpuNow:
        """The GPU now, SM activity since the last call (a queue's view of its GPUs; telemetry.gpu_now)."""
        with self._lock:
            reading, self._gpm_prev[gpu_uuid] = gpu_now(self.backend, gpu_uuid, self._gpm_prev.get(gpu_uuid))
        return reading

    def start_sampling(self, cell_id: str, pids: dict[int, int]) -> str:
        """Start sampling the cell's GPU (``pids``: training process -> job index); returns the source."""
        state = self._cells[cell_id]
        cfg = state.cell.config.telemetry
        uuid = state.slot.gpu.uuid
        source = pick_source(self.backend, uuid, cfg.source)
        if not cfg.enabled:
            return "off"
        mig = {b.mig_uuid for b in state.bindings if b.mig_uuid}
        devices = [d for d in self.backend.mig_devices(uuid) if d.uuid in mig] if mig else []
        state.sampler = Sampler(
            self.backend,
            cell_id,
            uuid,
            source,
            cfg.interval_ms,
            pids,
            devices,
            on_row=self._gauges.publish,
            processes=cfg.processes,
            gi_sm_share=gi_sm_shares(state.slot.gpu.name, devices),
        )
        state.sampler.start()
        visible = next((b.mig_uuid for b in state.bindings if b.mig_uuid), uuid)
        state.injector = injector_for(self.backend, uuid, visible, state.cell.config.cluster.sim_inject, list(pids))
        return source

    def measuring(self, cell_id: str) -> None:
        """The cell's measured epochs begin: start the noise ``cluster.sim_inject`` puts into them."""
        state = self._cells.get(cell_id)
        if state is not None and state.injector is not None:
            state.injector.measuring()

    def measured(self, cell_id: str) -> None:
        """The cell's measured epochs are over: stop its injected noise before the node's next cell
        measures (``cluster.isolate_measurement`` releases the node as this returns)."""
        state = self._cells.get(cell_id)
        if state is not None and state.injector is not None:
            state.injector.stop()

    def stop_sampling(self, cell_id: str) -> Samples:
        """Stop sampling the cell's GPU; the rows sampled since :meth:`start_sampling`."""
        state = self._cells.get(cell_id)
        if state is None or state.sampler is None:
            return Samples()
        sampler, state.sampler = state.sampler, None
        if state.injector is not None:
            state.injector.stop()  # the measured epochs are over
        rows = sampler.stop()
        return Samples(rows=tuple(rows), errors=tuple(sampler.errors))

    # --- inspection (tests, tools) -----------------------------------------------------------
    def mig_layout(self, gpu_uuid: str) -> list[Any]:
        return self.backend.gpu_instances(gpu_uuid)

    def held(self) -> dict[str, list[str]]:  # each GPU with residents -> their cells
        with self._lock:
            return {uuid: sorted(slot.residents) for uuid, slot in self._slots.items() if slot.residents}


# Passed as a mapping: ray.remote's typed overloads list task options only, and max_concurrency is an actor's.
_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 32}
RemoteSteward = ray.remote(**_ACTOR_OPTIONS)(Steward)
