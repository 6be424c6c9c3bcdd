"""The node steward: one named actor per Ray node that owns GPU state and samples the GPUs.

It is the only process that touches a node's MPS daemons and MIG layout, and the only one that
reads NVML for telemetry (it never initialises CUDA). A cell asks it to ``prepare`` its GPU for
a mode (which returns one :class:`~raycolloc.cellspec.Binding` per job), to start and stop
sampling, and to ``release`` the GPU, which the cell always does in ``finally``.

A GPU is held by at most one cell. Ray grants a cell's GPU lease only after the previous holder's
lease is gone, so when a cell arrives for a GPU that a dead cell still holds here (its driver was
killed), that stale state is released first: its MPS daemon stopped, its MIG layout restored.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raycolloc.cellspec import Binding, JobSpec
from raycolloc.config import ClusterConfig, MigConfig, ModeConfig, TelemetryConfig
from raycolloc.cpus import CpuPool
from raycolloc.gpu.backend import GpuBackend, GpuInfo, MigDevice
from raycolloc.metrics import make_gauge
from raycolloc.modes.mig import MigManager
from raycolloc.modes.mps import CONTROL, MpsDaemon, MpsError
from raycolloc.priority import normal_priority
from raycolloc.telemetry import Sampler, pick_source

__all__ = ["Steward", "get_steward", "start_stewards", "steward_name"]

log = logging.getLogger(__name__)
NAMESPACE = "raycolloc"


class GpuBusy(RuntimeError):
    """The GPU is held by another live cell."""


@dataclass
class _CellState:
    cell_id: str
    gpu: GpuInfo
    mode: str
    mps: MpsDaemon | None = None
    mig: MigManager | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    sampler: Sampler | None = None
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)


def _make_backend(node_id: str, cluster: ClusterConfig, num_gpus: int) -> GpuBackend:
    if cluster.backend == "nvml":
        from raycolloc.gpu.nvml import NvmlBackend

        return NvmlBackend()
    from raycolloc.gpu.sim import SimBackend

    return SimBackend(node_id, num_gpus, cluster.gpu_model, mig_enabled=cluster.sim_mig_mode == "enabled")


class Steward:
    """See the module docstring. Created through :func:`get_steward`."""

    def __init__(self, node_id: str, cluster: ClusterConfig, num_gpus: int, pipe_root: str) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s steward %(message)s")
        normal_priority()  # MPS daemons and servers it starts inherit its niceness
        self.node_id = node_id
        self.cluster = cluster
        self.backend = _make_backend(node_id, cluster, num_gpus)
        self.pipe_root = Path(pipe_root)
        self.control = os.environ.get("RAYCOLLOC_MPS_CONTROL", CONTROL)
        if self.backend.kind == "sim":
            from raycolloc.gpu.sim_mps import install_control

            self.control = install_control(self.pipe_root / "sim-bin")
        self._lock = threading.RLock()
        self._cells: dict[str, _CellState] = {}
        self._holder: dict[str, str] = {}  # gpu uuid -> cell id
        self._gauges: dict[str, Any] = {}
        self._cpus = CpuPool()  # the cores Ray may use on this node, handed to jobs per cell

    def __repr__(self) -> str:
        return f"Steward({self.node_id[:12]}:{self.backend.kind})"

    # --- discovery -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The node, its backend and its GPUs (used by the sweep's pre-flight checks)."""
        return {"node_id": self.node_id, "backend": self.backend.kind, "pid": os.getpid(),
                "gpus": self.backend.gpus(), "driver": self.backend.driver_version()}

    def resolve_gpu(self, ray_gpu_id: str) -> GpuInfo:
        return self.backend.gpu_for_ray_id(ray_gpu_id)

    # --- prepare / release -----------------------------------------------------------------
    def prepare(self, cell_id: str, gpu_uuid: str, mode: ModeConfig, mig: MigConfig, jobs: tuple[JobSpec, ...],
                mix_layout: Any = None) -> list[Binding]:
        """Make the GPU ready for ``mode`` and return one binding per job.

        Raises:
            GpuBusy, MpsError, MigUnavailable, LayoutError: the GPU cannot be prepared; nothing
            was left changed.
        """
        with self._lock:
            holder = self._holder.get(gpu_uuid)
            if holder is not None and holder != cell_id:
                log.warning("gpu=%s held by stale cell=%s: releasing it first", gpu_uuid, holder)
                self.release(holder)
            self._sim_admin_mig_mode(gpu_uuid, mode.name == "mig")
            gpu = self.backend.gpu(gpu_uuid)
            state = _CellState(cell_id, gpu, mode.name)
            self._cells[cell_id] = state
            self._holder[gpu_uuid] = cell_id
        try:
            if mode.name == "mig":
                bindings = self._prepare_mig(state, mig, jobs, mix_layout)
            else:
                daemon = MpsDaemon(gpu_uuid, gpu.index, mode.pipe_root, self.control)
                prepare = self._prepare_naive if mode.name == "naive" else self._prepare_mps
                bindings = prepare(state, daemon, jobs)
            return self._pin_cpus(cell_id, gpu, jobs, bindings)
        except BaseException:
            self.release(cell_id)
            raise

    def _pin_cpus(self, cell_id: str, gpu: GpuInfo, jobs: tuple[JobSpec, ...], bindings: list[Binding]) -> list[Binding]:
        """Give each job with ``trainer.cpu_affinity=auto`` cores of its own (see raycolloc.cpus)."""
        wanted = [job for job in jobs if job.trainer.cpu_affinity == "auto"]
        if not wanted:
            return bindings
        near = self.backend.cpu_affinity(gpu.uuid)
        with self._lock:
            picked = self._cpus.allocate(cell_id, [job.trainer.num_cpus for job in wanted], near)
        if picked is None:
            return bindings
        cores = dict(zip([job.index for job in wanted], picked, strict=True))
        return [replace(b, cpus=cores[b.job_index]) if b.job_index in cores else b for b in bindings]

    def _sim_admin_mig_mode(self, gpu_uuid: str, want_mig: bool) -> None:
        # Simulated GPUs with sim_mig_mode=auto behave like a GPU whose administrator sets MIG
        # mode to what each cell needs. Real GPUs: raycolloc never changes MIG mode.
        if self.backend.kind == "sim" and self.cluster.sim_mig_mode == "auto":
            self.backend.admin_set_mig_mode(gpu_uuid, want_mig)  # type: ignore[attr-defined]

    def _prepare_naive(self, state: _CellState, daemon: MpsDaemon, jobs: tuple[JobSpec, ...]) -> list[Binding]:
        gpu = state.gpu
        if gpu.mig_enabled:
            raise MpsError(f"mode=naive: MIG mode is enabled on {gpu.uuid}; run mode=mig there or use another GPU")
        serving = daemon.serves_gpu_elsewhere()
        if daemon.stop_stale():
            log.warning("gpu=%s stopped a stale raycolloc MPS daemon before a naive cell", gpu.uuid)
        if serving:
            raise MpsError(
                f"mode=naive refused: an MPS control daemon already serves GPU {gpu.index} ({gpu.uuid}) "
                f"(pid {serving[0]['pid']}, pipe {serving[0]['pipe_dir']}); its clients would share one MPS "
                f"server. Stop it (echo quit | CUDA_MPS_PIPE_DIRECTORY={serving[0]['pipe_dir']} {CONTROL})")
        # A private, empty pipe directory: CUDA finds no control daemon there and runs without MPS,
        # even if someone starts one on the default /tmp/nvidia-mps later.
        private = Path(daemon.dir) / "no-mps"
        private.mkdir(parents=True, exist_ok=True)
        env = {"CUDA_VISIBLE_DEVICES": gpu.uuid, "CUDA_MPS_PIPE_DIRECTORY": str(private)}
        return [Binding(job.index, gpu.uuid, dict(env), mps_pipe_dir=str(private), mps_control=self.control)
                for job in jobs]

    def _prepare_mps(self, state: _CellState, daemon: MpsDaemon, jobs: tuple[JobSpec, ...]) -> list[Binding]:
        if state.gpu.mig_enabled:
            raise MpsError(f"mode=mps: MIG mode is enabled on {state.gpu.uuid}; MPS over MIG is not supported here")
        daemon.start()
        state.mps = daemon
        return [Binding(job.index, state.gpu.uuid,
                        daemon.binding_env(job.index, job.active_thread_percentage, job.pinned_mem_limit),
                        mps_pipe_dir=str(daemon.pipe_dir), mps_control=self.control) for job in jobs]

    def _prepare_mig(self, state: _CellState, mig: MigConfig, jobs: tuple[JobSpec, ...], mix_layout: Any) -> list[Binding]:
        manager = MigManager(self.backend, state.gpu)
        state.mig = manager
        devices, profiles = manager.prepare(mig, jobs, mix_layout)
        state.mig_devices = devices
        return [Binding(job.index, state.gpu.uuid, {"CUDA_VISIBLE_DEVICES": dev.uuid}, mig_uuid=dev.uuid,
                        mig_profile=profile) for job, dev, profile in zip(jobs, devices, profiles, strict=True)]

    def release(self, cell_id: str) -> dict[str, Any]:
        """Stop sampling, stop the MPS daemon, restore the MIG layout. Safe to call twice."""
        with self._lock:
            state = self._cells.pop(cell_id, None)
            if state is None:
                return {"released": False}
            if self._holder.get(state.gpu.uuid) == cell_id:
                del self._holder[state.gpu.uuid]
            self._cpus.release(cell_id)
        done: dict[str, Any] = {"released": True, "errors": []}
        if state.sampler is not None:
            state.sampler.stop()
        if self.backend.kind == "sim":
            for p in self.backend.processes(state.gpu.uuid):
                self.backend.detach(p.pid)  # type: ignore[attr-defined]
        if state.mps is not None:
            try:
                state.mps.stop()
                done["mps_stopped"] = True
            except Exception as exc:  # noqa: BLE001 - keep releasing the rest
                done["errors"].append(f"mps: {exc}")
        if state.mig is not None:
            try:
                state.mig.restore()
                done["mig_restored"] = True
            except Exception as exc:  # noqa: BLE001
                done["errors"].append(f"mig: {exc}")
        log.info("cell=%s gpu=%s released %s", cell_id, state.gpu.uuid, done)
        return done

    # --- telemetry -------------------------------------------------------------------------
    def start_sampling(self, cell_id: str, pids: dict[int, int], cfg: TelemetryConfig) -> str:
        """Start sampling the cell's GPU; returns the telemetry source used."""
        state = self._cells[cell_id]
        source = pick_source(self.backend, state.gpu.uuid, cfg.source)
        if not cfg.enabled:
            return "off"
        state.sampler = Sampler(self.backend, cell_id, state.gpu.uuid, source, cfg.interval_ms, pids,
                                state.mig_devices, on_row=self._publish, processes=cfg.processes)
        state.sampler.start()
        return source

    def stop_sampling(self, cell_id: str) -> dict[str, Any]:
        state = self._cells.get(cell_id)
        if state is None or state.sampler is None:
            return {"rows": [], "errors": []}
        sampler, state.sampler = state.sampler, None
        rows = sampler.stop()
        return {"rows": rows, "errors": sampler.errors}

    def _publish(self, row: dict[str, Any]) -> None:
        if not self._gauges:
            tags = ("gpu", "cell")
            self._gauges = {
                "sm_active": make_gauge("raycolloc_gpu_sm_active", "SM activity of a GPU (%)", tags),
                "mem_used_mib": make_gauge("raycolloc_gpu_mem_used_mib", "GPU memory used (MiB)", tags),
                "power_w": make_gauge("raycolloc_gpu_power_w", "GPU power (W)", tags),
            }
        tags = {"gpu": row["gpu_uuid"], "cell": row["cell_id"]}
        # Without GPM or DCGM there is no SM activity; the gauge then shows NVML utilisation.
        sm = row["sm_active"] if row.get("sm_active") is not None else row.get("gpu_util")
        values = {"sm_active": sm, "mem_used_mib": row.get("mem_used_mib"), "power_w": row.get("power_w")}
        for key, gauge in self._gauges.items():
            if values.get(key) is not None:
                gauge.set(float(values[key]), tags=tags)

    # --- jobs ------------------------------------------------------------------------------
    def report(self, cell_id: str, job_index: int, pid: int, progress: dict[str, Any], h2d_bytes_per_step: int) -> None:
        """Progress pushed by a trainer about once a second."""
        state = self._cells.get(cell_id)
        if state is not None:
            state.progress[job_index] = progress
        if self.backend.kind == "sim":
            rate = progress.get("samples_per_s") or 0.0
            batch = max(1, progress.get("batch_size", 1))
            self.backend.report_h2d(pid, rate / batch * h2d_bytes_per_step)  # type: ignore[attr-defined]

    def progress(self, cell_id: str) -> dict[int, dict[str, Any]]:
        state = self._cells.get(cell_id)
        return dict(state.progress) if state else {}

    def sim_attach(self, gpu_uuid: str, mig_uuid: str | None, pid: int, mem_bytes: int, threads: int = 1) -> None:
        """A simulated job's CUDA initialisation (memory accounting; raises on out of memory)."""
        self.backend.attach(gpu_uuid, mig_uuid, pid, mem_bytes, threads)  # type: ignore[attr-defined]

    # --- inspection (tests, tools) -----------------------------------------------------------
    def mig_layout(self, gpu_uuid: str) -> list[Any]:
        return self.backend.gpu_instances(gpu_uuid)

    def held(self) -> dict[str, str]:
        return dict(self._holder)

    def sim_admin(self, gpu_uuid: str, mig_enabled: bool | None = None,
                  instances: list[tuple[int, int, list[tuple[int, int]]]] | None = None) -> list[Any]:
        """Simulated GPUs only (tests, demos): what an administrator does by hand with nvidia-smi.

        ``instances`` replaces the GPU's MIG instances (``nvidia-smi mig -dci``/``-dgi``, then
        ``-cgi``/``-cci``) by ``[(gi_profile_id, gi_start, [(ci_profile_id, ci_start), ...]), ...]``,
        created in that order; ``mig_enabled`` sets MIG mode (``nvidia-smi -i N -mig 0|1``) in between.
        The simulated GPU enforces NVML's rules (placements, counts, idle GPU for a mode change).
        Returns the GPU's instances afterwards.

        Raises:
            RuntimeError: the backend is not simulated. GpuBusy: a cell holds the GPU.
        """
        if self.backend.kind != "sim":
            raise RuntimeError("sim_admin works on simulated GPUs only; on real GPUs an administrator uses nvidia-smi")
        backend: Any = self.backend
        with self._lock:
            if gpu_uuid in self._holder:
                raise GpuBusy(f"GPU {gpu_uuid} is held by cell {self._holder[gpu_uuid]}")
            if instances is not None:
                for gi in backend.gpu_instances(gpu_uuid):
                    for ci in gi.compute_instances:
                        backend.destroy_compute_instance(gpu_uuid, gi.gi_id, ci.ci_id)
                    backend.destroy_gpu_instance(gpu_uuid, gi.gi_id)
            if mig_enabled is not None:
                backend.admin_set_mig_mode(gpu_uuid, mig_enabled)
            for gi_profile, gi_start, cis in instances or []:
                gi_id = backend.create_gpu_instance(gpu_uuid, gi_profile, gi_start)
                for ci_profile, ci_start in cis:
                    backend.create_compute_instance(gpu_uuid, gi_id, ci_profile, ci_start)
            return backend.gpu_instances(gpu_uuid)


RemoteSteward = ray.remote(num_cpus=0, max_concurrency=32)(Steward)


def steward_name(node_id: str, cluster: ClusterConfig) -> str:
    kind = cluster.backend if cluster.backend != "sim" else f"sim-{cluster.gpu_model}-{cluster.sim_mig_mode}"
    return f"raycolloc:steward:{node_id[:12]}:{kind}"


def _node_gpus(node_id: str) -> int:
    return next((int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["NodeID"] == node_id), 0)


def _steward_actor(node_id: str, cluster: ClusterConfig, num_gpus: int, pipe_root: str) -> Any:
    """The steward actor of ``node_id``, created unless one runs (detached: it outlives any one
    sweep); not waited for."""
    return RemoteSteward.options(
        name=steward_name(node_id, cluster), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(node_id, cluster, num_gpus, pipe_root)


def get_steward(node_id: str, cluster: ClusterConfig, pipe_root: str, timeout: float = 60.0) -> Any:
    """The steward of ``node_id``, created on first use, once it answers."""
    handle = _steward_actor(node_id, cluster, _node_gpus(node_id), pipe_root)
    ray.get(handle.held.remote(), timeout=timeout)  # wait until it is up
    return handle


def start_stewards(cluster: ClusterConfig, pipe_root: str, timeout: float = 60.0) -> int:
    """Start the steward of every live node with GPUs at once, before a sweep's first cells, so they
    do not each wait for it inside their set-up (2.6-2.8 s on 4 x H200, docs/measurements.md, fourth
    session). Returns how many answered; one that does not is left to its first cell, which records
    the error."""
    gpus = {n["NodeID"]: int(n["Resources"]["GPU"]) for n in ray.nodes()
            if n.get("Alive") and n["Resources"].get("GPU", 0) > 0}
    handles = [_steward_actor(node, cluster, count, pipe_root) for node, count in gpus.items()]
    ready, _ = ray.wait([h.held.remote() for h in handles], num_returns=len(handles), timeout=timeout)
    if len(ready) < len(handles):
        log.warning("%d of %d stewards did not start within %gs", len(handles) - len(ready), len(handles), timeout)
    return len(ready)
