"""The simulated GPU backend (local mode): named GPU models without a GPU.

It implements :class:`~raycolloc.gpu.backend.GpuBackend` with the rules of real hardware:
memory capacity per GPU and per MIG device, MIG mode, the model's MIG profile table (counts,
compute slices, placement slots, compute-instance placements), busy instances that cannot be
destroyed. Telemetry is synthesised from the jobs attached to each GPU: their CPU time stands in
for SM activity, their declared memory for device memory, and the host-to-device bytes they report
for PCIe traffic. Every number it produces is labelled ``sim-*`` in the telemetry source column.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

import psutil

from raycolloc.gpu.backend import (
    ComputeInstanceRecord,
    GpuInfo,
    GpuInstanceRecord,
    MigDevice,
    ProcessUsage,
)
from raycolloc.mig.profiles import GpuModel, get_gpu_model

__all__ = ["SimBackend", "SimNvmlError", "SimOutOfMemory"]

_CONTEXT_MIB = 500.0  # a CUDA context's own footprint
_POWER_W = {"A100": (55.0, 400.0), "H100": (70.0, 700.0), "H200": (75.0, 700.0)}
_SM_PER_BUSY_JOB = 0.55  # share of the SMs one fully busy job keeps active


class SimNvmlError(RuntimeError):
    """What NVML would return as an error code, with its name in the message."""


class SimOutOfMemory(MemoryError):
    """A job asked the simulated GPU for more memory than it has free."""


@dataclass
class _Proc:
    pid: int
    mem_mib: float
    mig_uuid: str | None
    threads: int
    last_cpu: float = 0.0
    h2d_bytes_s: float = 0.0
    busy: float = 0.0


@dataclass
class _Ci:
    ci_id: int
    profile_id: int
    start: int
    uuid: str


@dataclass
class _Gi:
    gi_id: int
    profile_id: int
    start: int
    cis: dict[int, _Ci] = field(default_factory=dict)


@dataclass
class _Gpu:
    index: int
    uuid: str
    model: GpuModel
    mig_enabled: bool
    gis: dict[int, _Gi] = field(default_factory=dict)
    procs: dict[int, _Proc] = field(default_factory=dict)
    energy_mj: float = 0.0
    last_energy_t: float = field(default_factory=time.monotonic)
    last_busy_t: float = field(default_factory=time.monotonic)
    sm_active: float = 0.0


class SimBackend:
    """Simulated GPUs of one node.

    Args:
        node_id: the Ray node (UUIDs are derived from it, so they are stable per node).
        num_gpus: GPUs on the node (Ray's fake ``GPU`` resource).
        gpu_model: a registered MIG table name, e.g. ``A100-SXM4-40GB``.
        mig_enabled: initial MIG mode of every GPU.
    """

    kind = "sim"

    def __init__(self, node_id: str, num_gpus: int, gpu_model: str, mig_enabled: bool = False) -> None:
        model = get_gpu_model(gpu_model)
        self._lock = threading.RLock()
        self._gpus = [
            _Gpu(i, f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'raycolloc-sim/{node_id}/{i}')}", model, mig_enabled)
            for i in range(num_gpus)
        ]
        self._next_id = 1

    # --- devices -------------------------------------------------------------------------
    def _g(self, uuid: str) -> _Gpu:
        for g in self._gpus:
            if g.uuid == uuid:
                return g
        raise KeyError(f"no simulated GPU with UUID {uuid}; found {[g.uuid for g in self._gpus]}")

    def driver_version(self) -> str:
        return "sim"

    def gpus(self) -> list[GpuInfo]:
        return [self.gpu(g.uuid) for g in self._gpus]

    def gpu(self, uuid: str) -> GpuInfo:
        g = self._g(uuid)
        return GpuInfo(index=g.index, uuid=g.uuid, name=f"Simulated {g.model.name}",
                       memory_mib=g.model.total_memory_mib, sm_count=g.model.total_sms, mig_supported=True,
                       mig_enabled=g.mig_enabled, pci_bus_id=f"00000000:{0x10 + g.index:02X}:00.0",
                       backend=self.kind, driver="sim")

    def gpu_for_ray_id(self, ray_gpu_id: str) -> GpuInfo:
        rid = str(ray_gpu_id)
        if rid.startswith("GPU-"):
            return self.gpu(rid)
        return self.gpu(self._gpus[int(rid)].uuid)

    def model(self, uuid: str) -> GpuModel:
        return self._g(uuid).model

    # --- jobs on the simulated GPU ---------------------------------------------------------
    def attach(self, uuid: str, mig_uuid: str | None, pid: int, mem_bytes: int, threads: int = 1) -> None:
        """A job initialises its (simulated) CUDA context and allocates ``mem_bytes``.

        Raises:
            SimOutOfMemory: the GPU (or its MIG device) has less free memory than asked.
        """
        with self._lock:
            g = self._g(uuid)
            if g.mig_enabled and mig_uuid is None:
                raise SimNvmlError(f"NVML_ERROR_INVALID_STATE: MIG mode is enabled on {uuid}; a job needs a MIG device")
            need = mem_bytes / (1 << 20) + _CONTEXT_MIB
            if mig_uuid is not None:
                device = next((d for d in self.mig_devices(uuid) if d.uuid == mig_uuid), None)
                if device is None:
                    raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no MIG device {mig_uuid} on {uuid}")
                capacity = device.memory_mib
                used = sum(p.mem_mib for p in g.procs.values() if p.mig_uuid == mig_uuid and p.pid != pid)
            else:
                capacity = g.model.total_memory_mib
                used = sum(p.mem_mib for p in g.procs.values() if p.pid != pid)
            if used + need > capacity:
                where = mig_uuid or uuid
                raise SimOutOfMemory(
                    f"simulated CUDA out of memory on {where}: tried to allocate {need / 1024:.2f} GiB; "
                    f"{(capacity - used) / 1024:.2f} GiB free of {capacity / 1024:.2f} GiB")
            proc = _Proc(pid, need, mig_uuid, max(1, threads))
            proc.last_cpu = _cpu_seconds(pid)
            g.procs[pid] = proc

    def detach(self, pid: int) -> None:
        with self._lock:
            for g in self._gpus:
                g.procs.pop(pid, None)

    def report_h2d(self, pid: int, bytes_per_s: float) -> None:
        with self._lock:
            for g in self._gpus:
                if pid in g.procs:
                    g.procs[pid].h2d_bytes_s = bytes_per_s

    def _prune(self, g: _Gpu) -> None:
        for pid in [p for p in g.procs if not psutil.pid_exists(p)]:
            del g.procs[pid]

    def cpu_affinity(self, uuid: str) -> list[int] | None:
        return None  # a simulated GPU sits on no NUMA node: every core of the node is as near

    def processes(self, uuid: str) -> list[ProcessUsage]:
        with self._lock:
            g = self._g(uuid)
            self._prune(g)
            return [ProcessUsage(p.pid, p.mem_mib) for p in g.procs.values()]

    # --- telemetry -----------------------------------------------------------------------
    def _busy(self, g: _Gpu, gi_id: int | None) -> tuple[float, float]:
        """Summed busy fraction and H2D bytes/s of the jobs on a GPU (or one GPU instance)."""
        mig_uuids = None
        if gi_id is not None:
            mig_uuids = {ci.uuid for ci in g.gis[gi_id].cis.values()} if gi_id in g.gis else set()
        busy = h2d = 0.0
        for p in g.procs.values():
            if mig_uuids is not None and p.mig_uuid not in mig_uuids:
                continue
            busy += min(1.0, p.busy)
            h2d += p.h2d_bytes_s
        return busy, h2d

    def _tick(self, g: _Gpu) -> None:
        """Advance the simulated clock: per-job busy fractions, SM activity, energy."""
        now = time.monotonic()
        dt = now - g.last_busy_t
        if dt >= 0.05:
            # Busy fractions over a shorter window are noise: they wait for a later tick.
            self._prune(g)
            for p in g.procs.values():
                cpu = _cpu_seconds(p.pid)
                p.busy = max(0.0, (cpu - p.last_cpu) / dt / p.threads)
                p.last_cpu = cpu
            busy, _ = self._busy(g, None)
            g.sm_active = 100.0 * min(1.0, busy * _SM_PER_BUSY_JOB)
            g.last_busy_t = now
        # Energy accrues on every read, as NVML's counter does: two reads a few ms apart differ.
        idle, tdp = _POWER_W.get(g.model.name[:4], (60.0, 400.0))
        g.energy_mj += (idle + (tdp - idle) * g.sm_active / 100.0) * (now - g.last_energy_t) * 1000.0
        g.last_energy_t = now

    def basic_sample(self, uuid: str, pcie: bool = True) -> dict[str, float | None]:
        with self._lock:
            g = self._g(uuid)
            self._tick(g)
            _, h2d = self._busy(g, None)
            idle, tdp = _POWER_W.get(g.model.name[:4], (60.0, 400.0))
            used = sum(p.mem_mib for p in g.procs.values())
            return {
                "mem_used_mib": used, "mem_total_mib": float(g.model.total_memory_mib),
                # Like NVML's utilisation: 100 whenever any kernel ran in the window.
                "gpu_util": 100.0 if g.sm_active > 1 else 0.0, "mem_util": g.sm_active * 0.3,
                "power_w": idle + (tdp - idle) * g.sm_active / 100.0,
                "pcie_tx_bytes_s": h2d * 0.02, "pcie_rx_bytes_s": h2d,
                "sm_clock_mhz": 1980.0 if g.sm_active > 1 else 345.0, "temperature_c": 35.0 + g.sm_active * 0.3,
            }

    def energy_mj(self, uuid: str) -> float | None:
        with self._lock:
            g = self._g(uuid)
            self._tick(g)
            return g.energy_mj

    def gpm_supported(self, uuid: str) -> bool:
        # GPM exists on Hopper and newer, as on real hardware.
        return self._g(uuid).model.name.startswith(("H100", "H200", "B"))

    def gpm_sample(self, uuid: str, gi_id: int | None = None) -> Any:
        with self._lock:
            g = self._g(uuid)
            self._tick(g)
            busy, h2d = self._busy(g, gi_id)
            if gi_id is not None:
                if gi_id not in g.gis:
                    raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no GPU instance {gi_id} on {uuid}")
                share = g.model.profile(g.gis[gi_id].profile_id).compute_slices / g.model.compute_slices
                sm = 100.0 * min(1.0, busy * _SM_PER_BUSY_JOB / share)
            else:
                sm = g.sm_active
            return {"t": time.monotonic(), "sm": sm, "h2d": h2d}

    def gpm_metrics(self, before: Any, after: Any) -> dict[str, float | None]:
        sm = (before["sm"] + after["sm"]) / 2
        return {"sm_active": sm, "sm_occupancy": sm * 0.4, "tensor_active": 0.0, "dram_active": sm * 0.3,
                "gr_engine_active": min(100.0, sm * 1.6), "pcie_tx_bytes_s": after["h2d"] * 0.02,
                "pcie_rx_bytes_s": after["h2d"]}

    def gpm_free(self, sample: Any) -> None:
        return None

    # --- MIG -----------------------------------------------------------------------------
    def mig_mode(self, uuid: str) -> tuple[bool, bool]:
        g = self._g(uuid)
        return g.mig_enabled, g.mig_enabled

    def can_reconfigure_mig(self) -> bool:
        return True

    def admin_set_mig_mode(self, uuid: str, enabled: bool) -> None:
        """What an administrator does with ``nvidia-smi -mig``: needs an idle GPU without instances."""
        with self._lock:
            g = self._g(uuid)
            self._prune(g)
            if g.mig_enabled == enabled:
                return
            if g.procs or g.gis:
                raise SimNvmlError(f"NVML_ERROR_IN_USE: cannot change MIG mode of {uuid}: it is in use")
            g.mig_enabled = enabled

    def _require_mig(self, g: _Gpu) -> None:
        if not g.mig_enabled:
            raise SimNvmlError(f"NVML_ERROR_NOT_SUPPORTED: MIG mode is disabled on {g.uuid}")

    def gpu_instances(self, uuid: str) -> list[GpuInstanceRecord]:
        with self._lock:
            g = self._g(uuid)
            if not g.mig_enabled:
                return []
            return [GpuInstanceRecord(gi.gi_id, gi.profile_id, gi.start,
                                      tuple(ComputeInstanceRecord(c.ci_id, c.profile_id, c.start)
                                            for c in sorted(gi.cis.values(), key=lambda c: c.ci_id)))
                    for gi in sorted(g.gis.values(), key=lambda x: x.gi_id)]

    def create_gpu_instance(self, uuid: str, profile_id: int, start: int) -> int:
        with self._lock:
            g = self._g(uuid)
            self._require_mig(g)
            try:
                prof = g.model.profile(int(profile_id))
            except ValueError as exc:
                raise SimNvmlError(f"NVML_ERROR_INVALID_ARGUMENT: {exc}") from None
            if start not in prof.placements:
                raise SimNvmlError(f"NVML_ERROR_INVALID_ARGUMENT: {prof.name} cannot start at slot {start}; "
                                   f"placements {list(prof.placements)}")
            same = sum(1 for gi in g.gis.values() if gi.profile_id == prof.profile_id)
            used_slots = {s for gi in g.gis.values() for s in g.model.profile(gi.profile_id).slots(gi.start)}
            used_compute = sum(g.model.profile(gi.profile_id).compute_slices for gi in g.gis.values())
            if (same >= prof.max_count or used_slots & set(prof.slots(start))
                    or used_compute + prof.compute_slices > g.model.compute_slices):
                raise SimNvmlError(f"NVML_ERROR_INSUFFICIENT_RESOURCES: no room for {prof.name} at slot {start}")
            gi_id = self._new_id()
            g.gis[gi_id] = _Gi(gi_id, prof.profile_id, start)
            return gi_id

    def create_compute_instance(self, uuid: str, gi_id: int, profile_id: int, start: int | None) -> int:
        with self._lock:
            g = self._g(uuid)
            self._require_mig(g)
            gi = g.gis.get(gi_id)
            if gi is None:
                raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no GPU instance {gi_id} on {uuid}")
            gprof = g.model.profile(gi.profile_id)
            try:
                cprof = gprof.ci_profile(int(profile_id))
            except ValueError as exc:
                raise SimNvmlError(f"NVML_ERROR_NOT_SUPPORTED: {exc}") from None
            used = {s for c in gi.cis.values() for s in range(c.start, c.start + gprof.ci_profile(c.profile_id).slot_size)}
            starts = [start] if start is not None else list(cprof.placements)
            for s in starts:
                if s in cprof.placements and not used & set(range(s, s + cprof.slot_size)):
                    if sum(1 for c in gi.cis.values() if c.profile_id == cprof.nvml_index) >= cprof.max_count:
                        break
                    ci_id = max(gi.cis, default=-1) + 1
                    mig_uuid = f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'{uuid}/{gi_id}/{ci_id}/{self._next_id}')}"
                    self._next_id += 1
                    gi.cis[ci_id] = _Ci(ci_id, cprof.nvml_index, s, mig_uuid)
                    return ci_id
            raise SimNvmlError(f"NVML_ERROR_INSUFFICIENT_RESOURCES: no room for {cprof.name} in {gprof.name} "
                               f"(GPU instance {gi_id})")

    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None:
        with self._lock:
            g = self._g(uuid)
            self._prune(g)
            gi = g.gis.get(gi_id)
            if gi is None or ci_id not in gi.cis:
                raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no compute instance {gi_id}/{ci_id} on {uuid}")
            if any(p.mig_uuid == gi.cis[ci_id].uuid for p in g.procs.values()):
                raise SimNvmlError(f"NVML_ERROR_IN_USE: compute instance {gi_id}/{ci_id} has running processes")
            del gi.cis[ci_id]

    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None:
        with self._lock:
            g = self._g(uuid)
            gi = g.gis.get(gi_id)
            if gi is None:
                raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no GPU instance {gi_id} on {uuid}")
            if gi.cis:
                raise SimNvmlError(f"NVML_ERROR_IN_USE: GPU instance {gi_id} still has compute instances")
            del g.gis[gi_id]

    def mig_devices(self, uuid: str) -> list[MigDevice]:
        with self._lock:
            g = self._g(uuid)
            out = []
            for gi in g.gis.values():
                gprof = g.model.profile(gi.profile_id)
                for ci in gi.cis.values():
                    cprof = gprof.ci_profile(ci.profile_id)
                    out.append(MigDevice(ci.uuid, gi.gi_id, ci.ci_id, gi.profile_id, ci.profile_id, gi.start, ci.start,
                                         gprof.memory_mib, cprof.sm_count))
            return sorted(out, key=lambda d: (d.gi_start, d.ci_start))

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id


def _cpu_seconds(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system + getattr(t, "children_user", 0.0))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
