"""GPU telemetry sampled by the steward while a cell runs.

Sources, tried in order for ``telemetry.source=auto``:

* ``dcgm``: DCGM profiling fields, when its Python bindings import and a host engine answers.
* ``gpm``: NVML GPU Performance Monitoring (Hopper and newer): SM activity, SM occupancy, tensor
  activity, DRAM bandwidth, PCIe rx/tx per second; per MIG GPU instance with nvmlGpmMigSampleGet.
* ``nvml``: basic NVML: utilisation (the share of time *any* kernel ran, not SM activity),
  memory, power, PCIe throughput counters.

Every source also gives memory used, power, the energy counter, and per job process its GPU memory
and SM utilisation (NVML's, summed over the process and its children: a script may start the
process that uses the GPU), host CPU % and RSS (as the study sampled ``top`` beside the GPU). Each row names its
``source``; on the simulated backend sources are ``sim-gpm`` / ``sim-nvml``.

What explains a noisy run is sampled beside it: each GPU row carries the SM and memory clocks, the
temperature, the enforced power limit, NVML's clock-event reasons and the node's load average; once a
second, the count of the GPU's processes that are not the cell's and each job's core clock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psutil

from raycolloc.node.dcgm import DcgmFields, dcgm_available
from raycolloc.node.gpu.backend import GpuBackend, MigDevice, ProcessUsage
from raycolloc.node.hostclock import core_mhz, foreign_count, load_avg_1m, run_delay_s
from raycolloc.node.mig.placement import gpu_model_of
from raycolloc.results.rows import SCOPE_GPU, SCOPE_MIG, SCOPE_PROCESS, TelemetryRow
from raycolloc.spec import GpuNow

__all__ = ["Sampler", "gi_sm_shares", "gpu_now", "pick_source"]

log = logging.getLogger(__name__)


def gi_sm_shares(gpu_name: str, devices: list[MigDevice]) -> dict[int, float]:
    """Each GPU instance's share of the GPU's SMs, from the model's MIG table (empty if unknown)."""
    try:
        model = gpu_model_of(gpu_name)
        return {d.gi_id: model.profile(d.gi_profile_id).sm_count / model.total_sms for d in devices}
    except (KeyError, ValueError) as exc:
        log.warning("telemetry=no-gi-shares gpu=%r: %s", gpu_name, exc)
        return {}


def gpu_now(backend: GpuBackend, uuid: str, prev: Any) -> tuple[GpuNow, Any]:
    """The GPU now (memory, power, utilisation) and, where it has GPM, its SM activity, occupancy and
    DRAM activity since ``prev`` (the GPM sample the last call returned; None: not yet). Returns the
    reading and the GPM sample to pass next time (None without GPM)."""
    s = backend.basic_sample(uuid, pcie=False)
    metrics: dict[str, float | None] = {}
    cur = backend.gpm_sample(uuid) if backend.gpm_supported(uuid) else None
    if prev is not None and cur is not None:
        try:
            metrics = backend.gpm_metrics(prev, cur)
        finally:
            backend.gpm_free(prev)

    def share(key: str) -> float | None:  # GPM's percentages as 0..1
        value = metrics.get(key)
        return None if value is None else float(value) / 100.0

    reading = GpuNow(
        uuid=uuid,
        mem_used_mib=float(s.get("mem_used_mib") or 0.0),
        mem_total_mib=float(s.get("mem_total_mib") or 0.0),
        power_w=s.get("power_w"),
        util=float(s.get("gpu_util") or 0.0) / 100.0,
        sm_active=share("sm_active"),
        sm_occupancy=share("sm_occupancy"),
        dram_active=share("dram_active"),
    )
    return reading, cur


def pick_source(backend: GpuBackend, uuid: str, wanted: str) -> str:
    """The telemetry source for a GPU: the wanted one, or the best available for ``auto``.

    Raises:
        RuntimeError: a source was asked for explicitly and is not available here.
    """
    prefix = backend.traits.telemetry_prefix
    if wanted in ("auto", "dcgm") and backend.traits.dcgm and dcgm_available():
        return "dcgm"
    if wanted == "dcgm":
        raise RuntimeError(
            "telemetry.source=dcgm: DCGM's Python bindings or host engine are not available; use telemetry.source=auto"
        )
    if wanted in ("auto", "gpm") and backend.gpm_supported(uuid):
        return prefix + "gpm"
    if wanted == "gpm":
        raise RuntimeError(f"telemetry.source=gpm: NVML GPM is not supported on {uuid} (Hopper or newer needed)")
    return prefix + "nvml"


class Sampler:
    """Samples one GPU (and its MIG devices and job processes) on a background thread.

    Args:
        backend: the node's GPU backend.
        cell_id: written into every row.
        gpu_uuid: the GPU.
        source: from :func:`pick_source`.
        interval_ms: sampling period (GPM needs >= 100 ms between samples).
        pids: job process ids -> job index.
        mig_devices: MIG devices of the cell (rows per MIG device with their GPU instance's GPM).
        on_row: called with each GPU-level row (the steward publishes dashboard gauges from it).
        gi_sm_share: per GPU instance, its share of the GPU's SMs: under MIG, GPM measures SM
            activity per GPU instance only, and the GPU row's ``sm_active`` is their sum weighted by it.
    """

    def __init__(
        self,
        backend: GpuBackend,
        cell_id: str,
        gpu_uuid: str,
        source: str,
        interval_ms: int,
        pids: dict[int, int],
        mig_devices: list[MigDevice] | None = None,
        on_row: Any = None,
        processes: bool = True,
        gi_sm_share: dict[int, float] | None = None,
    ) -> None:
        self.backend, self.cell_id, self.gpu_uuid, self.source = backend, cell_id, gpu_uuid, source
        self.interval = interval_ms / 1000.0
        self.pids = dict(pids)
        self.mig_devices = list(mig_devices or [])
        self.gi_sm_share = dict(gi_sm_share or {})
        self.on_row = on_row
        self.processes = processes
        self.rows: list[TelemetryRow] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{cell_id}", daemon=True)
        self._gpm_prev: dict[int | None, Any] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._cores: dict[int, list[int]] = {}  # job pid -> the cores it may run on (pinned before sampling)
        self._tick = 0
        self._dcgm: DcgmFields | None = None
        self._process_every = max(1, round(1.0 / self.interval))
        self.errors: list[str] = []

    def start(self) -> None:
        self._dcgm = DcgmFields(int(self.interval * 1000)) if self.source == "dcgm" else None
        for pid in self.pids:
            try:
                proc = psutil.Process(pid)
                proc.cpu_percent(None)  # first call primes the counter
                self._procs[pid] = proc
                self._cores[pid] = list(proc.cpu_affinity() or [])
            except psutil.NoSuchProcess:
                pass
        self._thread.start()

    def stop(self) -> list[TelemetryRow]:
        self._stop.set()
        self._thread.join(timeout=10)
        for sample in self._gpm_prev.values():
            self.backend.gpm_free(sample)
        self._gpm_prev.clear()
        if self._dcgm is not None:
            self._dcgm.close()
        return self.rows

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - a failed sample must not end the cell
                if len(self.errors) < 10:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    log.warning("telemetry=sample-failed cell=%s error=%s", self.cell_id, exc)
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def _row(
        self, ts: float, scope: str, mig_uuid: str | None = None, gi_id: int | None = None, **values: Any
    ) -> TelemetryRow:
        return TelemetryRow(
            cell_id=self.cell_id,
            gpu_uuid=self.gpu_uuid,
            mig_uuid=mig_uuid,
            gi_id=gi_id,
            scope=scope,
            ts=ts,
            source=self.source,
            **values,
        )

    def _gpm(self, gi_id: int | None) -> dict[str, float | None]:
        sample = self.backend.gpm_sample(self.gpu_uuid, gi_id)
        prev = self._gpm_prev.get(gi_id)
        self._gpm_prev[gi_id] = sample
        if prev is None:
            return {}
        try:
            return self.backend.gpm_metrics(prev, sample)
        finally:
            self.backend.gpm_free(prev)

    def _gpu_sm_active(self, by_gi: dict[int, dict[str, float | None]]) -> float | None:
        """The whole GPU's SM activity from its GPU instances' (each % of its own SMs), or None when
        an instance has no value yet or its share of the SMs is unknown."""
        values = [(self.gi_sm_share.get(gi), m.get("sm_active")) for gi, m in by_gi.items()]
        known = [(share, sm) for share, sm in values if share is not None and sm is not None]
        if not values or len(known) < len(values):
            return None
        return sum(share * sm for share, sm in known)

    def _sample(self) -> None:
        ts = time.time()
        self._tick += 1
        gpm = self.source.endswith("gpm")
        # With GPM, PCIe comes from GPM; the basic counters would block ~40 ms per sample.
        values: dict[str, Any] = dict(self.backend.basic_sample(self.gpu_uuid, pcie=not gpm and self._dcgm is None))
        values["energy_mj"] = self.backend.energy_mj(self.gpu_uuid)
        values["clock_events"] = self.backend.clock_events(self.gpu_uuid)
        values["load_avg_1m"] = load_avg_1m()
        # Job processes change slowly: sampled about once a second, not every tick.
        process_tick = self.processes and not (self._tick - 1) % self._process_every
        usage = {p.pid: p for p in self.backend.processes(self.gpu_uuid)} if process_tick else {}
        families = {pid: _family(proc) for pid, proc in self._procs.items()} if process_tick else {}
        if process_tick:
            ours = {p for family in families.values() for p in family}
            values["foreign_gpu_procs"] = foreign_count(list(usage), ours)
        if self._dcgm is not None:
            values.update({k: v for k, v in self._dcgm.sample(self.gpu_uuid).items() if v is not None})
        if gpm and not self.mig_devices:
            values.update(self._gpm(None))
        by_gi: dict[int, dict[str, float | None]] = {}
        if gpm:
            for dev in self.mig_devices:
                if dev.gi_id not in by_gi:
                    by_gi[dev.gi_id] = self._gpm(dev.gi_id)
            values.setdefault("sm_active", self._gpu_sm_active(by_gi))
        gpu_row = self._row(ts, SCOPE_GPU, **values)
        self.rows.append(gpu_row)
        if self.on_row is not None:
            self.on_row(gpu_row)
        for dev in self.mig_devices if gpm else []:
            self.rows.append(self._row(ts, SCOPE_MIG, mig_uuid=dev.uuid, gi_id=dev.gi_id, **by_gi[dev.gi_id]))
        if not process_tick:
            return
        for pid, job_index in self.pids.items():
            proc = self._procs.get(pid)
            if proc is None:
                continue
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:  # it ended; its parent has not reaped it yet
                    continue
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss / (1 << 20)
            except psutil.NoSuchProcess:
                continue
            if rss == 0:  # it is exiting: its memory goes before it turns zombie (a CI run sampled that)
                continue
            gpu_use: dict[str, Any] = _gpu_usage(families.get(pid, [pid]), usage)  # proc_gpu_* columns only
            mhz = core_mhz(self._cores.get(pid, ()))
            self.rows.append(
                self._row(
                    ts,
                    SCOPE_PROCESS,
                    pid=pid,
                    job_index=job_index,
                    proc_cpu_percent=cpu,
                    proc_rss_mib=rss,
                    proc_core_mhz=mhz,
                    proc_run_delay_s=run_delay_s(pid),
                    **gpu_use,
                )
            )


def _family(proc: psutil.Process) -> list[int]:
    """A job's process and its descendants (a script may start the process that uses the GPU)."""
    try:
        return [proc.pid, *(c.pid for c in proc.children(recursive=True))]
    except psutil.Error:
        return [proc.pid]


def _gpu_usage(pids: list[int], usage: dict[int, ProcessUsage]) -> dict[str, float | None]:
    """GPU memory and SM utilisation of a job's process and its descendants (None: NVML saw none)."""
    found = [usage[p] for p in pids if p in usage]
    mem = [u.used_mib for u in found if u.used_mib is not None]
    sm = [u.sm_util for u in found if u.sm_util is not None]
    return {"proc_gpu_mem_mib": sum(mem) if mem else None, "proc_sm_util": sum(sm) if sm else None}
