"""The real GPU backend: NVML through ``pynvml`` (nvidia-ml-py).

Only the steward process creates one. It never initialises CUDA, so it holds no context on the
GPUs it watches. MIG changes (create/destroy) are made only when the steward was allowed to
(``mig.allow_reconfigure``) and this process may (root); MIG *mode* is never changed here.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

import pynvml

from raycolloc.devices import CudaDevice, JobDevice
from raycolloc.node.gpu.backend import (
    ComputeInstanceRecord,
    GpuInfo,
    GpuInstanceRecord,
    MigDevice,
    ProcessUsage,
)
from raycolloc.node.gpu.clock_events import reason_names
from raycolloc.node.gpu.kinds import NVML

__all__ = ["GPM_METRICS", "NvmlBackend", "mig_mode", "nvml_gpu_count", "nvml_instances"]

# GPM metric ids (NVML_GPM_METRIC_*) and the telemetry column each one fills.
GPM_METRICS: dict[str, int] = {
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_active": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "gr_engine_active": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "pcie_tx_bytes_s": pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx_bytes_s": pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
}
# NVML reports PCIe GPM metrics in MiB/s; telemetry columns are bytes/s.
_GPM_SCALE = {"pcie_tx_bytes_s": 1 << 20, "pcie_rx_bytes_s": 1 << 20}
_INIT_LOCK = threading.Lock()


def nvml_instances(
    profiles: int, handle_type: Any, profile_info: Callable[[int], Any], list_into: Callable[[int, Any, Any], None]
) -> list[Any]:
    """Every instance NVML lists, profile by profile: the GPU instances of a GPU, or the compute
    instances of a GPU instance. A profile the device does not have, or whose instances cannot be
    listed, is passed over.

    Args:
        profiles: how many profile constants there are (``NVML_*_PROFILE_COUNT``).
        handle_type: the ctypes type of one handle (``c_nvmlGpuInstance_t``, ...).
        profile_info: profile constant -> its info (``.id``, ``.instanceCount``), or NVMLError.
        list_into: (profile id, array of handles, pointer to a count) -> fills both, as NVML does.
    """
    handles: list[Any] = []
    for const in range(profiles):
        try:
            info = profile_info(const)
        except pynvml.NVMLError:
            continue
        arr = (handle_type * max(1, info.instanceCount))()
        count = ctypes.c_uint(0)
        try:
            list_into(info.id, arr, ctypes.byref(count))
        except pynvml.NVMLError:
            continue
        handles.extend(arr[i] for i in range(count.value))
    return handles


def nvml_gpu_count() -> int:
    """GPUs NVML can see on this machine; 0 when NVML or the driver is missing."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def mig_mode(handle: Any) -> tuple[bool, bool]:
    """A GPU's ``(supported, enabled)`` MIG mode, as NVML reads it now (read only; a GPU without MIG:
    ``(False, False)``)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return False, False
    return True, bool(current)


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlBackend:
    """GPU backend over the real NVML."""

    traits = NVML
    kind = traits.name

    def __init__(self) -> None:
        with _INIT_LOCK:
            pynvml.nvmlInit()
        self._handles: dict[str, Any] = {}
        self._util_seen: dict[str, int] = {}  # GPU -> newest process-utilisation sample read (us)
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self._handles[_str(pynvml.nvmlDeviceGetUUID(h))] = h

    # --- devices -------------------------------------------------------------------------
    def _h(self, uuid: str) -> Any:
        try:
            return self._handles[uuid]
        except KeyError:
            raise KeyError(f"no GPU with UUID {uuid} on this node; found {sorted(self._handles)}") from None

    def driver_version(self) -> str:
        return _str(pynvml.nvmlSystemGetDriverVersion())

    def gpus(self) -> list[GpuInfo]:
        return [self.gpu(uuid) for uuid in self._handles]

    def gpu(self, uuid: str) -> GpuInfo:
        h = self._h(uuid)
        mig_supported, mig_enabled = mig_mode(h)
        try:
            sm_count: int | None = int(pynvml.nvmlDeviceGetAttributes(h).multiprocessorCount)
        except pynvml.NVMLError:
            sm_count = None
        return GpuInfo(
            index=int(pynvml.nvmlDeviceGetIndex(h)),
            uuid=uuid,
            name=_str(pynvml.nvmlDeviceGetName(h)),
            memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20)),
            sm_count=sm_count,
            mig_supported=mig_supported,
            mig_enabled=mig_enabled,
            pci_bus_id=_str(pynvml.nvmlDeviceGetPciInfo(h).busId),
            backend=self.kind,
            driver=self.driver_version(),
        )

    def gpu_for_ray_id(self, ray_gpu_id: str) -> GpuInfo:
        """Map the id Ray put in CUDA_VISIBLE_DEVICES to a GPU.

        Ray's ids are the entries of the raylet's own CUDA_VISIBLE_DEVICES (or physical indices
        when it had none); trainers set CUDA_DEVICE_ORDER=PCI_BUS_ID so indices mean NVML's order.
        """
        rid = str(ray_gpu_id)
        if rid.startswith("GPU-"):
            return self.gpu(rid)
        index = int(rid)
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return self.gpu(_str(pynvml.nvmlDeviceGetUUID(h)))

    def processes(self, uuid: str) -> list[ProcessUsage]:
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(self._h(uuid))
        except pynvml.NVMLError:
            return []
        util = self._sm_util(uuid)
        out = []
        for p in procs:
            used = p.usedGpuMemory
            out.append(
                ProcessUsage(
                    pid=int(p.pid), used_mib=None if used is None else used / (1 << 20), sm_util=util.get(int(p.pid))
                )
            )
        return out

    def _sm_util(self, uuid: str) -> dict[int, float]:
        """Per process, the mean SM utilisation NVML sampled since the last call (empty when it has
        none, e.g. under MPS where the server is the only process it sees)."""
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(self._h(uuid), self._util_seen.get(uuid, 0))
        except pynvml.NVMLError:
            return {}
        by_pid: dict[int, list[float]] = {}
        for sample in samples:
            by_pid.setdefault(int(sample.pid), []).append(float(sample.smUtil))
            self._util_seen[uuid] = max(self._util_seen.get(uuid, 0), int(sample.timeStamp))
        return {pid: sum(v) / len(v) for pid, v in by_pid.items()}

    def cpu_affinity(self, uuid: str) -> list[int] | None:
        """The CPU cores NVML calls ideal for this GPU (its NUMA node); None if NVML cannot say."""
        words = max(1, -(-(os.cpu_count() or 64) // 64))
        try:
            mask = pynvml.nvmlDeviceGetCpuAffinity(self._h(uuid), words)
        except pynvml.NVMLError:
            return None
        return [w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1] or None

    # --- basic metrics -------------------------------------------------------------------
    def basic_sample(self, uuid: str, pcie: bool = True) -> dict[str, float | None]:
        """Memory, utilisation, power, clocks; PCIe counters only if asked (each call blocks ~20 ms)."""
        h = self._h(uuid)
        row: dict[str, float | None] = {}
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        row["mem_used_mib"] = mem.used / (1 << 20)
        row["mem_total_mib"] = mem.total / (1 << 20)
        row["gpu_util"] = _try(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
        row["mem_util"] = _try(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(h).memory))
        row["power_w"] = _try(lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        if pcie:
            # nvmlDeviceGetPcieThroughput reports KB/s over a 20 ms window.
            throughput = pynvml.nvmlDeviceGetPcieThroughput
            row["pcie_tx_bytes_s"] = _try(lambda: throughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1024.0)
            row["pcie_rx_bytes_s"] = _try(lambda: throughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1024.0)
        row["sm_clock_mhz"] = _try(lambda: float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)))
        row["temperature_c"] = _try(lambda: float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
        row["mem_clock_mhz"] = _try(lambda: float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)))
        row["power_limit_w"] = _try(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
        return row

    def clock_events(self, uuid: str) -> str | None:
        """Why the clocks are below their maximum now ("" none; None where NVML cannot say): the
        clock-event reasons of drivers >= 535, else the throttle reasons older bindings name."""
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            call = getattr(pynvml, name, None)
            if call is None:
                continue
            try:
                return reason_names(int(call(self._h(uuid))))
            except pynvml.NVMLError:
                continue  # e.g. NVML_ERROR_FUNCTION_NOT_FOUND in an older driver: try the older name
        return None

    def energy_mj(self, uuid: str) -> float | None:
        return _try(lambda: float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h(uuid))))

    # --- GPM (Hopper and newer) ----------------------------------------------------------
    def gpm_supported(self, uuid: str) -> bool:
        try:
            return bool(pynvml.nvmlGpmQueryDeviceSupport(self._h(uuid)).isSupportedDevice)
        except (pynvml.NVMLError, AttributeError):
            return False

    def gpm_sample(self, uuid: str, gi_id: int | None = None) -> Any:
        sample = pynvml.nvmlGpmSampleAlloc()
        try:
            if gi_id is None:
                pynvml.nvmlGpmSampleGet(self._h(uuid), sample)
            else:
                pynvml.nvmlGpmMigSampleGet(self._h(uuid), gi_id, sample)
        except pynvml.NVMLError:
            pynvml.nvmlGpmSampleFree(sample)
            raise
        return sample

    def gpm_metrics(self, before: Any, after: Any) -> dict[str, float | None]:
        names = list(GPM_METRICS)
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(names)
        req.sample1 = before
        req.sample2 = after
        for i, name in enumerate(names):
            req.metrics[i].metricId = GPM_METRICS[name]
        pynvml.nvmlGpmMetricsGet(req)
        out: dict[str, float | None] = {}
        for i, name in enumerate(names):
            metric = req.metrics[i]
            ok = metric.nvmlReturn == pynvml.NVML_SUCCESS
            out[name] = float(metric.value) * _GPM_SCALE.get(name, 1) if ok else None
        return out

    def gpm_free(self, sample: Any) -> None:
        pynvml.nvmlGpmSampleFree(sample)

    # --- MIG -----------------------------------------------------------------------------
    def mig_mode(self, uuid: str) -> tuple[bool, bool]:
        try:
            current, pending = pynvml.nvmlDeviceGetMigMode(self._h(uuid))
        except pynvml.NVMLError:
            return False, False
        return bool(current), bool(pending)

    def job_env(self, uuid: str) -> dict[str, str]:
        return {}  # CUDA finds the GPU by the UUID in CUDA_VISIBLE_DEVICES

    def job_device(self, uuid: str) -> JobDevice:
        return CudaDevice()

    def mps_control(self, pipe_root: str, default: str) -> str:
        return default

    def expect_mig_mode(self, uuid: str, enabled: bool) -> None:
        return None  # raycolloc never changes MIG mode on a real GPU

    def can_reconfigure_mig(self) -> bool:
        return os.geteuid() == 0

    def _gi_handles(self, uuid: str) -> list[Any]:
        h = self._h(uuid)
        return nvml_instances(
            pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT,
            pynvml.c_nvmlGpuInstance_t,
            lambda const: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, const),
            lambda profile, arr, count: pynvml.nvmlDeviceGetGpuInstances(h, profile, arr, count),
        )

    def _ci_handles(self, gi: Any) -> list[Any]:
        shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        return nvml_instances(
            pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
            pynvml.c_nvmlComputeInstance_t,
            lambda const: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, const, shared),
            lambda profile, arr, count: pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile, arr, count),
        )

    def _gi_by_id(self, uuid: str, gi_id: int) -> Any:
        return pynvml.nvmlDeviceGetGpuInstanceById(self._h(uuid), gi_id)

    def gpu_instances(self, uuid: str) -> list[GpuInstanceRecord]:
        records = []
        for gi in self._gi_handles(uuid):
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            cis = []
            for ci in self._ci_handles(gi):
                cinfo = pynvml.nvmlComputeInstanceGetInfo(ci)
                cis.append(ComputeInstanceRecord(int(cinfo.id), int(cinfo.profileId), int(cinfo.placement.start)))
            records.append(
                GpuInstanceRecord(
                    int(info.id),
                    int(info.profileId),
                    int(info.placement.start),
                    tuple(sorted(cis, key=lambda c: c.ci_id)),
                )
            )
        return sorted(records, key=lambda r: r.gi_id)

    def create_gpu_instance(self, uuid: str, profile_id: int, start: int) -> int:
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = 0  # filled by the driver from the profile
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(self._h(uuid), profile_id, ctypes.byref(placement))
        return int(pynvml.nvmlGpuInstanceGetInfo(gi).id)

    def create_compute_instance(self, uuid: str, gi_id: int, profile_id: int, start: int | None) -> int:
        gi = self._gi_by_id(uuid, gi_id)
        if start is None:
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, profile_id)
        else:
            placement = pynvml.c_nvmlComputeInstancePlacement_t()
            placement.start = start
            ci = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile_id, ctypes.byref(placement))
        return int(pynvml.nvmlComputeInstanceGetInfo(ci).id)

    def destroy_compute_instance(self, uuid: str, gi_id: int, ci_id: int) -> None:
        gi = self._gi_by_id(uuid, gi_id)
        pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))

    def destroy_gpu_instance(self, uuid: str, gi_id: int) -> None:
        pynvml.nvmlGpuInstanceDestroy(self._gi_by_id(uuid, gi_id))

    def mig_devices(self, uuid: str) -> list[MigDevice]:
        h = self._h(uuid)
        instances = {r.gi_id: r for r in self.gpu_instances(uuid)}
        devices = []
        for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except pynvml.NVMLError:
                continue
            gi_id = int(pynvml.nvmlDeviceGetGpuInstanceId(mh))
            ci_id = int(pynvml.nvmlDeviceGetComputeInstanceId(mh))
            gi = instances.get(gi_id)
            ci = next((c for c in gi.compute_instances if c.ci_id == ci_id), None) if gi else None
            attrs = pynvml.nvmlDeviceGetAttributes(mh)
            devices.append(
                MigDevice(
                    uuid=_str(pynvml.nvmlDeviceGetUUID(mh)),
                    gi_id=gi_id,
                    ci_id=ci_id,
                    gi_profile_id=gi.profile_id if gi else -1,
                    ci_profile_id=ci.profile_id if ci else -1,
                    gi_start=gi.start if gi else -1,
                    ci_start=ci.start if ci else -1,
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(mh).total // (1 << 20)),
                    sm_count=int(attrs.multiprocessorCount),
                )
            )
        return sorted(devices, key=lambda d: (d.gi_start, d.ci_start))


def _try(fn: Any) -> float | None:
    try:
        return fn()
    except (pynvml.NVMLError, AttributeError):  # AttributeError: a binding too old to name the call
        return None
