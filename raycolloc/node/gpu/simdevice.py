"""The simulated GPUs of one node: hardware state that every process on the host sees.

A real GPU is one piece of state behind two doors: NVML (the steward reads it, creates MIG
instances) and the CUDA driver (a job allocates memory on it). The simulation keeps that state in
one JSON file per node under ``cluster.sim_root``, changed under an exclusive ``flock``, so the
steward's :class:`~raycolloc.node.gpu.sim.SimBackend` and each job's
:mod:`~raycolloc.node.gpu.sim_cuda` see the same devices, as processes do on a GPU. The state
outlives any process: a MIG layout a killed run left stays on the simulated GPU, as on a real one,
and UUIDs are stable per state directory (derived from ``cluster.sim_root``, the node's place on the host and
the model): another user's or another install's simulated GPUs are others (issue 46).

The rules of real hardware are enforced here: memory capacity per GPU and per MIG device, MIG
mode changes only on an idle GPU, the model's MIG profile table (counts, compute slices,
placements), busy instances that cannot be destroyed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from raycolloc.node.mig.profiles import GpuModel, get_gpu_model
from raycolloc.procs import alive

__all__ = ["CONTEXT_MIB", "STATE_ENV", "SimDevices", "SimGpu", "SimNvmlError", "SimOutOfMemory", "SimProcess"]

CONTEXT_MIB = 500.0  # a CUDA context's own footprint
STATE_ENV = "RAYCOLLOC_SIM_GPU_STATE"  # a job's environment names its node's state file (sim_cuda reads it)


class SimNvmlError(RuntimeError):
    """What NVML would return as an error code, with its name in the message."""


class SimOutOfMemory(MemoryError):
    """A job asked the simulated GPU for more memory than it has free."""


@dataclass
class SimProcess:
    pid: int
    mem_mib: float
    mig_uuid: str | None
    threads: int
    h2d_bytes_s: float = 0.0


@dataclass
class SimCi:
    ci_id: int
    profile_id: int
    start: int
    uuid: str


@dataclass
class SimGi:
    gi_id: int
    profile_id: int
    start: int
    cis: list[SimCi] = field(default_factory=list)


@dataclass
class SimGpu:
    index: int
    uuid: str
    mig_enabled: bool
    gis: list[SimGi] = field(default_factory=list)
    procs: list[SimProcess] = field(default_factory=list)

    def gi(self, gi_id: int) -> SimGi:
        for gi in self.gis:
            if gi.gi_id == gi_id:
                return gi
        raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no GPU instance {gi_id} on {self.uuid}")


def _load_gpu(data: dict) -> SimGpu:
    gis = [SimGi(g["gi_id"], g["profile_id"], g["start"], [SimCi(**c) for c in g["cis"]]) for g in data["gis"]]
    return SimGpu(data["index"], data["uuid"], data["mig_enabled"], gis, [SimProcess(**p) for p in data["procs"]])


class SimDevices:
    """The state file of one node's simulated GPUs (see :meth:`create`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.model: GpuModel = get_gpu_model(json.loads(self.path.read_text())["model"])

    @classmethod
    def create(cls, path: str | Path, node_key: str, num_gpus: int, gpu_model: str, mig_enabled: bool) -> SimDevices:
        """Open the state file, creating it with ``num_gpus`` idle GPUs if it is missing.

        Args:
            node_key: the node's stable name on its host (UUIDs derive from it).
            gpu_model: a registered MIG table name, e.g. ``H100-80GB``.
            mig_enabled: MIG mode of every GPU when the state is first created.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        model = get_gpu_model(gpu_model)
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                # One state directory is one simulated machine: its GPUs' UUIDs are stable across runs
                # and differ from another directory's (two test sessions side by side share nothing).
                key = f"{path.parent.resolve()}/{node_key}"
                gpus = [SimGpu(i, cls.stable_uuid(key, model.name, i), mig_enabled) for i in range(num_gpus)]
                path.write_text(json.dumps({"model": model.name, "gpus": [asdict(g) for g in gpus]}))
        return cls(path)

    @staticmethod
    def stable_uuid(node_key: str, model: str, index: int) -> str:
        return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'raycolloc-sim/{node_key}/{model}/{index}')}"

    def _read(self) -> list[SimGpu]:
        raw = json.loads(self.path.read_text()) if self.path.exists() else {"gpus": []}
        gpus = [_load_gpu(g) for g in raw["gpus"]]
        for g in gpus:
            g.procs = [p for p in g.procs if alive(p.pid)]  # the driver forgets dead processes
        return gpus

    @contextlib.contextmanager
    def state(self) -> Iterator[list[SimGpu]]:
        """The GPUs, locked for this process until the block ends; changes are written back."""
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                gpus = self._read()
                yield gpus
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"model": self.model.name, "gpus": [asdict(g) for g in gpus]}))
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def snapshot(self) -> list[SimGpu]:
        """The GPUs as they are now, for reading (the file is replaced atomically: no lock needed)."""
        return self._read()

    @staticmethod
    def find(gpus: list[SimGpu], uuid: str) -> SimGpu:
        for g in gpus:
            if g.uuid == uuid:
                return g
        raise KeyError(f"no simulated GPU with UUID {uuid}; found {[g.uuid for g in gpus]}")

    # --- the CUDA side: a job's context and memory ----------------------------------------------
    def attach(self, visible: str, pid: int, mem_bytes: int, threads: int = 1) -> None:
        """A job initialises its CUDA context on ``visible`` (a GPU or MIG UUID) and allocates memory.

        Raises:
            SimOutOfMemory: the GPU (or its MIG device) has less free memory than asked.
            SimNvmlError: the device is not there, or a whole GPU is asked for while MIG is on.
        """
        with self.state() as gpus:
            gpu, mig = self._device(gpus, visible)
            need = mem_bytes / (1 << 20) + CONTEXT_MIB
            if mig is not None:
                capacity = self.model.profile(mig[0].profile_id).memory_mib
                ci_uuids = {c.uuid for c in mig[0].cis}
                used = sum(p.mem_mib for p in gpu.procs if p.mig_uuid in ci_uuids and p.pid != pid)
            else:
                capacity = self.model.total_memory_mib
                used = sum(p.mem_mib for p in gpu.procs if p.pid != pid)
            if used + need > capacity:
                raise SimOutOfMemory(
                    f"simulated CUDA out of memory on {visible}: tried to allocate {need / 1024:.2f} GiB; "
                    f"{(capacity - used) / 1024:.2f} GiB free of {capacity / 1024:.2f} GiB"
                )
            gpu.procs = [p for p in gpu.procs if p.pid != pid]
            gpu.procs.append(SimProcess(pid, need, mig[1].uuid if mig else None, max(1, threads)))

    def _device(self, gpus: list[SimGpu], visible: str) -> tuple[SimGpu, tuple[SimGi, SimCi] | None]:
        for g in gpus:
            if g.uuid == visible:
                if g.mig_enabled:
                    raise SimNvmlError(
                        f"NVML_ERROR_INVALID_STATE: MIG mode is enabled on {g.uuid}; a job needs a MIG device"
                    )
                return g, None
            for gi in g.gis:
                for ci in gi.cis:
                    if ci.uuid == visible:
                        return g, (gi, ci)
        raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no simulated GPU or MIG device {visible}")

    def report_h2d(self, pid: int, bytes_per_s: float) -> None:
        """A job's host-to-device copy rate (the simulated PCIe counters add these up)."""
        with self.state() as gpus:
            for g in gpus:
                for p in g.procs:
                    if p.pid == pid:
                        p.h2d_bytes_s = bytes_per_s

    # --- the NVML side: MIG mode and instances --------------------------------------------------
    def set_mig_mode(self, uuid: str, enabled: bool) -> None:
        """What an administrator does with ``nvidia-smi -mig``: needs an idle GPU without instances."""
        with self.state() as gpus:
            g = self.find(gpus, uuid)
            if g.mig_enabled == enabled:
                return
            if g.procs or g.gis:
                raise SimNvmlError(f"NVML_ERROR_IN_USE: cannot change MIG mode of {uuid}: it is in use")
            g.mig_enabled = enabled

    def create_gpu_instance(self, uuid: str, profile_id: int, start: int) -> int:
        with self.state() as gpus:
            g = self._mig_gpu(gpus, uuid)
            try:
                prof = self.model.profile(int(profile_id))
            except ValueError as exc:
                raise SimNvmlError(f"NVML_ERROR_INVALID_ARGUMENT: {exc}") from None
            if start not in prof.placements:
                raise SimNvmlError(
                    f"NVML_ERROR_INVALID_ARGUMENT: {prof.name} cannot start at slot {start}; "
                    f"placements {list(prof.placements)}"
                )
            same = sum(1 for gi in g.gis if gi.profile_id == prof.profile_id)
            used_slots = {s for gi in g.gis for s in self.model.profile(gi.profile_id).slots(gi.start)}
            used_compute = sum(self.model.profile(gi.profile_id).compute_slices for gi in g.gis)
            if (
                same >= prof.max_count
                or used_slots & set(prof.slots(start))
                or used_compute + prof.compute_slices > self.model.compute_slices
            ):
                raise SimNvmlError(f"NVML_ERROR_INSUFFICIENT_RESOURCES: no room for {prof.name} at slot {start}")
            gi_id = max((gi.gi_id for g2 in gpus for gi in g2.gis), default=0) + 1
            g.gis.append(SimGi(gi_id, prof.profile_id, start))
            return gi_id

    def create_compute_instance(self, uuid: str, gi_id: int, profile_id: int, start: int | None) -> int:
        with self.state() as gpus:
            g = self._mig_gpu(gpus, uuid)
            gi = g.gi(gi_id)
            gprof = self.model.profile(gi.profile_id)
            try:
                cprof = gprof.ci_profile(int(profile_id))
            except ValueError as exc:
                raise SimNvmlError(f"NVML_ERROR_NOT_SUPPORTED: {exc}") from None
            used = {s for c in gi.cis for s in range(c.start, c.start + gprof.ci_profile(c.profile_id).slot_size)}
            if sum(1 for c in gi.cis if c.profile_id == cprof.nvml_index) < cprof.max_count:
                for s in [start] if start is not None else list(cprof.placements):
                    if s in cprof.placements and not used & set(range(s, s + cprof.slot_size)):
                        ci_id = max((c.ci_id for c in gi.cis), default=-1) + 1
                        mig_uuid = f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'{uuid}/{gi_id}/{ci_id}/{s}')}"
                        gi.cis.append(SimCi(ci_id, cprof.nvml_index, s, mig_uuid))
                        return ci_id
            raise SimNvmlError(
                f"NVML_ERROR_INSUFFICIENT_RESOURCES: no room for {cprof.name} in {gprof.name} (GPU instance {gi_id})"
            )

    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None:
        with self.state() as gpus:
            g = self.find(gpus, uuid)
            gi = g.gi(gi_id)
            ci = next((c for c in gi.cis if c.ci_id == ci_id), None)
            if ci is None:
                raise SimNvmlError(f"NVML_ERROR_NOT_FOUND: no compute instance {gi_id}/{ci_id} on {uuid}")
            if any(p.mig_uuid == ci.uuid for p in g.procs):
                raise SimNvmlError(f"NVML_ERROR_IN_USE: compute instance {gi_id}/{ci_id} has running processes")
            gi.cis.remove(ci)

    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None:
        with self.state() as gpus:
            g = self.find(gpus, uuid)
            gi = g.gi(gi_id)
            if gi.cis:
                raise SimNvmlError(f"NVML_ERROR_IN_USE: GPU instance {gi_id} still has compute instances")
            g.gis.remove(gi)

    def _mig_gpu(self, gpus: list[SimGpu], uuid: str) -> SimGpu:
        g = self.find(gpus, uuid)
        if not g.mig_enabled:
            raise SimNvmlError(f"NVML_ERROR_NOT_SUPPORTED: MIG mode is disabled on {g.uuid}")
        return g
