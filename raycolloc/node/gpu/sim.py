"""The simulated GPU backend (local mode): NVML's view of :mod:`raycolloc.node.gpu.simdevice`.

It implements :class:`~raycolloc.node.gpu.backend.GpuBackend` over the node's simulated devices,
with the rules of real hardware (enforced by the device state). Telemetry is synthesised from
the jobs attached to each GPU: their CPU time stands in for SM activity, their allocated memory for
device memory, and the host-to-device bytes they report for PCIe traffic. Every number it produces
is labelled ``sim-*`` in the telemetry source column.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from raycolloc.devices import JobDevice
from raycolloc.node.gpu.backend import ComputeInstanceRecord, GpuInfo, GpuInstanceRecord, MigDevice, ProcessUsage
from raycolloc.node.gpu.kinds import SIM
from raycolloc.node.gpu.sim_cuda import SimJobDevice
from raycolloc.node.gpu.sim_mps import install_control
from raycolloc.node.gpu.simdevice import STATE_ENV, SimDevices, SimGpu, SimNvmlError

__all__ = ["SIM_MEM_CLOCK_MHZ", "SIM_SM_CLOCK_MHZ", "STATE_ENV", "SimBackend", "SimNvmlError"]

_POWER_W = {"A100": (55.0, 400.0), "H100": (70.0, 700.0), "H200": (75.0, 700.0)}
_SM_PER_BUSY_JOB = 0.55  # share of the SMs one fully busy job keeps active
SIM_SM_CLOCK_MHZ = (345.0, 1980.0)  # idle and boost SM clocks (an H100 SXM's)
SIM_MEM_CLOCK_MHZ = 2619.0  # HBM3's clock: it does not scale with load


@dataclass
class _Clock:
    """Per-GPU counters NVML keeps in the driver: busy fractions, SM activity, energy."""

    last_busy_t: float
    last_energy_t: float
    sm_active: float = 0.0
    energy_mj: float = 0.0


class SimBackend:
    """Simulated GPUs of one node.

    Args:
        root: ``cluster.sim_root``, where the node's device state lives.
        node_key: the node's stable name on its host (e.g. ``vm-0``).
        num_gpus: GPUs on the node (Ray's fake ``GPU`` resource).
        gpu_model: a registered MIG table name, e.g. ``A100-SXM4-40GB``.
        mig_mode: ``enabled``/``disabled`` (MIG mode as an administrator set it) or ``auto`` (the
            simulated administrator sets it to what each cell needs).
    """

    traits = SIM
    kind = traits.name

    def __init__(self, root: str | Path, node_key: str, num_gpus: int, gpu_model: str, mig_mode: str = "auto") -> None:
        state = Path(root) / f"{node_key}-{gpu_model}-{num_gpus}gpu-mig{mig_mode}.json"
        self._open(SimDevices.create(state, node_key, num_gpus, gpu_model, mig_enabled=mig_mode == "enabled"), mig_mode)

    @classmethod
    def from_state(cls, path: str | Path) -> SimBackend:
        """The simulated GPUs of an existing state file (what a job's ``RAYCOLLOC_SIM_GPU_STATE``
        names): ``raycolloc.doctor`` restores a MIG layout a killed run left on them, without Ray."""
        backend = cls.__new__(cls)
        mode = Path(path).stem.rsplit("-mig", 1)[-1]
        backend._open(SimDevices(path), mode if mode in ("auto", "enabled", "disabled") else "auto")
        return backend

    def _open(self, devices: SimDevices, mig_mode: str) -> None:
        self.devices = devices
        self.model = self.devices.model
        self.mig_policy = mig_mode
        self._lock = threading.RLock()
        self._clocks: dict[str, _Clock] = {}
        self._cpu: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, busy fraction)
        self._caps: dict[str, tuple[float, str]] = {}  # GPU -> (clock factor, reason) while a cap holds it

    # --- devices -------------------------------------------------------------------------
    def driver_version(self) -> str:
        return "sim"

    def gpus(self) -> list[GpuInfo]:
        return [self._info(g) for g in self.devices.snapshot()]

    def gpu(self, uuid: str) -> GpuInfo:
        return self._info(SimDevices.find(self.devices.snapshot(), uuid))

    def _info(self, g: SimGpu) -> GpuInfo:
        return GpuInfo(
            index=g.index,
            uuid=g.uuid,
            name=f"Simulated {self.model.name}",
            memory_mib=self.model.total_memory_mib,
            sm_count=self.model.total_sms,
            mig_supported=True,
            mig_enabled=g.mig_enabled,
            pci_bus_id=f"00000000:{0x10 + g.index:02X}:00.0",
            backend=self.kind,
            driver="sim",
        )

    def gpu_for_ray_id(self, ray_gpu_id: str) -> GpuInfo:
        rid = str(ray_gpu_id)
        gpus = self.devices.snapshot()
        return self._info(SimDevices.find(gpus, rid) if rid.startswith("GPU-") else gpus[int(rid)])

    def job_env(self, uuid: str) -> dict[str, str]:
        """A job reaches its simulated GPU through the device state, as CUDA reaches the driver."""
        return {STATE_ENV: str(self.devices.path)}

    def job_device(self, uuid: str) -> JobDevice:
        """A job's process attaches to its simulated device itself, as CUDA's driver would."""
        return SimJobDevice()

    def mps_control(self, pipe_root: str, default: str) -> str:
        """The simulated ``nvidia-cuda-mps-control`` of this install, kept with the simulated machine
        (``cluster.sim_root``/bin), as the real one comes with the machine's driver."""
        return install_control(self.devices.path.parent / "bin")

    def expect_mig_mode(self, uuid: str, enabled: bool) -> None:
        """With ``sim_mig_mode=auto`` the simulated administrator sets MIG mode for the next cell."""
        if self.mig_policy == "auto":
            self.devices.set_mig_mode(uuid, enabled)

    def set_mig_mode(self, uuid: str, enabled: bool) -> None:
        """What an administrator does by hand with ``nvidia-smi -i N -mig 0|1`` (tests, demos)."""
        self.devices.set_mig_mode(uuid, enabled)

    def processes(self, uuid: str) -> list[ProcessUsage]:
        g = SimDevices.find(self.devices.snapshot(), uuid)
        # A process's SM share: its busy fraction (CPU time on the simulated device) times what one
        # busy job keeps active, as the GPU's SM activity is summed from them.
        return [
            ProcessUsage(p.pid, p.mem_mib, 100.0 * min(1.0, self._cpu.get(p.pid, (0.0, 0.0))[1]) * _SM_PER_BUSY_JOB)
            for p in g.procs
        ]

    def cpu_affinity(self, uuid: str) -> list[int] | None:
        return None  # a simulated GPU sits on no NUMA node: every core of the node is as near

    # --- telemetry -----------------------------------------------------------------------
    def _sample(self, uuid: str, gi_id: int | None = None) -> tuple[SimGpu, _Clock, float, float]:
        """The GPU, its clock advanced to now, and the summed busy fraction and H2D bytes/s of its
        jobs (or of one GPU instance's jobs)."""
        g = SimDevices.find(self.devices.snapshot(), uuid)
        now = time.monotonic()
        with self._lock:
            clock = self._clocks.setdefault(uuid, _Clock(now, now))
            dt = now - clock.last_busy_t
            if dt >= 0.05:
                # Busy fractions over a shorter window are noise: they wait for a later tick.
                for p in g.procs:
                    cpu = _cpu_seconds(p.pid)
                    last = self._cpu.get(p.pid, (cpu, 0.0))[0]
                    self._cpu[p.pid] = (cpu, max(0.0, (cpu - last) / dt / p.threads))
                busy_all = sum(min(1.0, self._cpu.get(p.pid, (0.0, 0.0))[1]) for p in g.procs)
                clock.sm_active = 100.0 * min(1.0, busy_all * _SM_PER_BUSY_JOB)
                clock.last_busy_t = now
            # Energy accrues on every read, as NVML's counter does: two reads a few ms apart differ.
            idle, tdp = self._power()
            clock.energy_mj += (idle + (tdp - idle) * clock.sm_active / 100.0) * (now - clock.last_energy_t) * 1000.0
            clock.last_energy_t = now
        procs = g.procs
        if gi_id is not None:
            ci_uuids = {c.uuid for c in g.gi(gi_id).cis}
            procs = [p for p in procs if p.mig_uuid in ci_uuids]
        busy = sum(min(1.0, self._cpu.get(p.pid, (0.0, 0.0))[1]) for p in procs)
        return g, clock, busy, sum(p.h2d_bytes_s for p in procs)

    def _power(self) -> tuple[float, float]:
        return _POWER_W.get(self.model.name[:4], (60.0, 400.0))

    def basic_sample(self, uuid: str, pcie: bool = True) -> dict[str, float | None]:
        g, clock, _, h2d = self._sample(uuid)
        idle, tdp = self._power()
        sm = clock.sm_active
        low, high = SIM_SM_CLOCK_MHZ
        factor = self._caps.get(uuid, (1.0, ""))[0]
        return {
            "mem_used_mib": sum(p.mem_mib for p in g.procs),
            "mem_total_mib": float(self.model.total_memory_mib),
            # Like NVML's utilisation: 100 whenever any kernel ran in the window.
            "gpu_util": 100.0 if sm > 1 else 0.0,
            "mem_util": sm * 0.3,
            "power_w": idle + (tdp - idle) * sm / 100.0,
            "pcie_tx_bytes_s": h2d * 0.02,
            "pcie_rx_bytes_s": h2d,
            "sm_clock_mhz": max(low, high * factor) if sm > 1 else low,
            "temperature_c": 35.0 + sm * 0.3,
            "mem_clock_mhz": SIM_MEM_CLOCK_MHZ,
            "power_limit_w": tdp,
        }

    def clock_events(self, uuid: str) -> str | None:
        """A cap's reason while one holds the clocks (``cap_clocks``), ``gpu_idle`` when no job
        keeps the SMs busy, else none."""
        cap = self._caps.get(uuid)
        if cap is not None:
            return cap[1]
        with self._lock:
            clock = self._clocks.get(uuid)
        return "gpu_idle" if clock is None or clock.sm_active <= 1 else ""

    def cap_clocks(self, uuid: str, factor: float | None, reason: str = "sw_power_cap") -> None:
        """Hold the GPU's SM clock at ``factor`` of its boost clock for ``reason`` (None: release),
        as a power or thermal cap does (``cluster.sim_inject=clock_drop``, raycolloc.node.gpu.sim_inject)."""
        if factor is None:
            self._caps.pop(uuid, None)
        else:
            self._caps[uuid] = (factor, reason)

    def energy_mj(self, uuid: str) -> float | None:
        return self._sample(uuid)[1].energy_mj

    def gpm_supported(self, uuid: str) -> bool:
        # GPM exists on Hopper and newer, as on real hardware.
        return self.model.name.startswith(("H100", "H200", "B"))

    def gpm_sample(self, uuid: str, gi_id: int | None = None) -> Any:
        g, clock, busy, h2d = self._sample(uuid, gi_id)
        if gi_id is None:
            return {"t": time.monotonic(), "sm": clock.sm_active, "h2d": h2d}
        share = self.model.profile(g.gi(gi_id).profile_id).compute_slices / self.model.compute_slices
        return {"t": time.monotonic(), "sm": 100.0 * min(1.0, busy * _SM_PER_BUSY_JOB / share), "h2d": h2d}

    def gpm_metrics(self, before: Any, after: Any) -> dict[str, float | None]:
        sm = (before["sm"] + after["sm"]) / 2
        return {
            "sm_active": sm,
            "sm_occupancy": sm * 0.4,
            "tensor_active": 0.0,
            "dram_active": sm * 0.3,
            "gr_engine_active": min(100.0, sm * 1.6),
            "pcie_tx_bytes_s": after["h2d"] * 0.02,
            "pcie_rx_bytes_s": after["h2d"],
        }

    def gpm_free(self, sample: Any) -> None:
        return None

    # --- MIG -----------------------------------------------------------------------------
    def mig_mode(self, uuid: str) -> tuple[bool, bool]:
        enabled = self.gpu(uuid).mig_enabled
        return enabled, enabled

    def can_reconfigure_mig(self) -> bool:
        return True

    def gpu_instances(self, uuid: str) -> list[GpuInstanceRecord]:
        g = SimDevices.find(self.devices.snapshot(), uuid)
        if not g.mig_enabled:
            return []
        return [
            GpuInstanceRecord(
                gi.gi_id,
                gi.profile_id,
                gi.start,
                tuple(
                    ComputeInstanceRecord(c.ci_id, c.profile_id, c.start) for c in sorted(gi.cis, key=lambda c: c.ci_id)
                ),
            )
            for gi in sorted(g.gis, key=lambda x: x.gi_id)
        ]

    def create_gpu_instance(self, uuid: str, profile_id: int, start: int) -> int:
        return self.devices.create_gpu_instance(uuid, profile_id, start)

    def create_compute_instance(self, uuid: str, gi_id: int, profile_id: int, start: int | None) -> int:
        return self.devices.create_compute_instance(uuid, gi_id, profile_id, start)

    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None:
        self.devices.destroy_compute_instance(uuid, gi_id, ci_id)

    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None:
        self.devices.destroy_gpu_instance(uuid, gi_id)

    def mig_devices(self, uuid: str) -> list[MigDevice]:
        g = SimDevices.find(self.devices.snapshot(), uuid)
        out = []
        for gi in g.gis:
            gprof = self.model.profile(gi.profile_id)
            for ci in gi.cis:
                out.append(
                    MigDevice(
                        ci.uuid,
                        gi.gi_id,
                        ci.ci_id,
                        gi.profile_id,
                        ci.profile_id,
                        gi.start,
                        ci.start,
                        gprof.memory_mib,
                        gprof.ci_profile(ci.profile_id).sm_count,
                    )
                )
        return sorted(out, key=lambda d: (d.gi_start, d.ci_start))


def _cpu_seconds(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system + getattr(t, "children_user", 0.0))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
