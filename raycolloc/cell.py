"""One cell end to end: lease a GPU, prepare it, train the jobs, sample, release, write.

The protocol (DESIGN.md, "Data flow of one cell"):

1. lease one whole GPU (placement group), 2. the node's steward prepares it for the mode and
returns one binding per job, 3. trainer actors build their workloads, 4. warm-up epoch, then a
barrier, 5. the measured epochs run together while the steward samples the GPU, 6. release in
``finally`` (also on error, OOM, dead actor, Ctrl-C), 7. write the rows atomically.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any

import ray

from raycolloc import progress
from raycolloc.cellspec import CellSpec, JobSpec
from raycolloc.config import Config
from raycolloc.environment import environment
from raycolloc.lease import GpuLease, acquire_gpu
from raycolloc.results import write_cell
from raycolloc.steward import NAMESPACE, get_steward
from raycolloc.summary import cell_summary
from raycolloc.trainer import Trainer

__all__ = ["CellOutcome", "run_cell"]

log = logging.getLogger(__name__)
# One call at a time: no caller needs a second concurrent call (progress goes to the steward; a hung or
# interrupted trainer is killed, not asked). The actor only relays; the job trains in a process of its own
# (raycolloc.jobproc says why).
RemoteTrainer = ray.remote(Trainer)


@dataclasses.dataclass
class CellOutcome:
    """What a cell produced: its rows (as written) and where."""

    cell: dict[str, Any]
    jobs: list[dict[str, Any]]
    epochs: list[dict[str, Any]]
    telemetry: list[dict[str, Any]]
    job_dir: Path

    @property
    def summary(self) -> str:
        return cell_summary(self.cell, self.jobs)

    @property
    def status(self) -> str:
        return str(self.cell["status"])


def _gather(refs: dict[int, Any], timeout: float, tick: Any = None) -> dict[int, dict[str, Any]]:
    """Wait for one call per job; a dead or hung actor becomes an error result for that job only."""
    results: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    pending = list(refs.values())
    while pending and time.monotonic() < deadline:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(2.0, max(0.0, deadline - time.monotonic())))
        if tick is not None and pending:
            tick()
    ready_set = set(refs.values()) - set(pending)
    for index, ref in refs.items():
        if ref not in ready_set:
            results[index] = {"status": "error", "error": f"timed out after {timeout:g}s", "info": {}, "epochs": []}
            continue
        try:
            results[index] = ray.get(ref, timeout=10)
        except ray.exceptions.RayActorError as exc:
            results[index] = {"status": "error", "error": f"trainer process died: {exc}".splitlines()[0][:2000],
                              "info": {}, "epochs": []}
        except Exception as exc:  # noqa: BLE001
            results[index] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000], "info": {}, "epochs": []}
    return results


class _Cell:
    def __init__(self, cfg: Config, spec: CellSpec, job_dir: Path) -> None:
        self.cfg, self.spec, self.job_dir = cfg, spec, job_dir
        self.lease: GpuLease | None = None
        self.steward: Any = None
        self.gpu: Any = None
        self.trainers: dict[int, Any] = {}
        self.states: dict[int, dict[str, Any]] = {}
        self.telemetry: list[dict[str, Any]] = []
        self.source = "off"
        self.status, self.reason = "ok", None
        self.t_start = time.time()
        self.prepare_s = self.setup_s = self.teardown_s = None

    def run(self) -> None:
        cfg, spec = self.cfg, self.spec
        cpus = max(cfg.trainer.num_cpus * spec.degree, 1.0)
        progress.report(spec.cell_id, state="leasing")
        self.lease = acquire_gpu(f"raycolloc:{spec.cell_id}", cpus, cfg.cluster.lease_timeout_s,
                                 on_wait=lambda s: log.debug("cell=%s waiting for a GPU (%.0fs)", spec.cell_id, s))
        progress.report(spec.cell_id, state="preparing")
        t_prepare = time.perf_counter()
        self.steward = get_steward(self.lease.node_id, cfg.cluster, cfg.mode.pipe_root)
        self.gpu = ray.get(self.steward.resolve_gpu.remote(self.lease.ray_gpu_id), timeout=60)
        bindings = ray.get(self.steward.prepare.remote(spec.cell_id, self.gpu.uuid, cfg.mode, cfg.mig, spec.jobs,
                                                       spec.mix_mig_layout), timeout=300)
        t_setup = time.perf_counter()
        self.prepare_s = t_setup - t_prepare  # steward: GPU lookup, MPS daemon or MIG layout, CPU cores
        for job, binding in zip(spec.jobs, bindings, strict=True):
            # No runtime_env: the binding's environment (GPU or MIG UUID, MPS pipe) is the training
            # process's, set by its actor; an actor without one may take a worker Ray already started.
            self.trainers[job.index] = RemoteTrainer.options(
                name=f"raycolloc:{spec.cell_id}/{job.name}", namespace=NAMESPACE,
                num_gpus=1.0 / spec.degree, num_cpus=cfg.trainer.num_cpus, scheduling_strategy=self.lease.strategy(),
            ).remote(job, binding, spec.cell_id, self.gpu.backend, self.steward)
        progress.report(spec.cell_id, state="setup")
        self.states = _gather({i: t.setup.remote() for i, t in self.trainers.items()}, cfg.trainer.setup_timeout_s)
        self.setup_s = time.perf_counter() - t_setup
        live = self._live()
        pids = {s["info"]["pid"]: i for i, s in self.states.items() if s.get("info", {}).get("pid")}
        self.source = ray.get(self.steward.start_sampling.remote(spec.cell_id, pids, cfg.telemetry), timeout=60)
        # Warm-up epoch (1) on every live job; waiting for all of them is the barrier after which
        # the measured epochs start together, so they overlap on the GPU.
        if spec.mix_name is not None:
            # Mixed cells: every job trains its own epochs to completion from a common start, as the
            # study's mixed workloads did; no barrier holds a fast job back for a slow one.
            progress.report(spec.cell_id, state="training")
            self._epochs(live, lambda job: (1, job.epochs))
            return
        progress.report(spec.cell_id, state="warm-up")
        self._epochs(live, lambda job: (1, 1))
        progress.report(spec.cell_id, state="measuring")
        self._epochs(self._live(), lambda job: (2, job.epochs))

    def _live(self) -> list[int]:
        return [i for i, s in self.states.items() if s["status"] == "ok"]

    def _epochs(self, live: list[int], span: Any) -> None:
        if not live:
            return
        jobs = {j.index: j for j in self.spec.jobs}
        refs = {i: self.trainers[i].run_epochs.remote(*span(jobs[i])) for i in live}
        for i, result in _gather(refs, self.cfg.trainer.epoch_timeout_s, tick=self._tick).items():
            # A dead or hung trainer returns nothing: keep what it reported before (pid, MIG device,
            # warm-up epoch), so its row still says where and how far it ran.
            before = self.states.get(i, {})
            self.states[i] = {**result, "info": result.get("info") or before.get("info", {}),
                              "epochs": result.get("epochs") or before.get("epochs", [])}

    def _tick(self) -> None:
        try:
            jobs = ray.get(self.steward.progress.remote(self.spec.cell_id), timeout=5)
        except Exception:  # noqa: BLE001 - progress is best effort
            return
        progress.report(self.spec.cell_id, jobs={str(k): v for k, v in jobs.items()})

    def finish(self, interrupted: bool = False) -> None:
        """Collect final job records, stop sampling, kill trainers, release GPU and lease.

        An interrupted cell writes no result, and its trainers may still be inside an epoch: a call
        to them would wait behind it (one call at a time), so they are killed without being asked.
        """
        t0 = time.perf_counter()
        try:
            self._finish(interrupted)
        finally:
            self.teardown_s = time.perf_counter() - t0

    def _finish(self, interrupted: bool) -> None:
        try:
            live = [] if interrupted else self._live()
            if live:
                # The final record adds what is known at the end (NVML memory); if a trainer cannot
                # give it, the job keeps the result it already reported.
                finals = _gather({i: self.trainers[i].finish.remote() for i in live}, 60)
                self.states.update({i: final for i, final in finals.items() if final["status"] == "ok"})
            if self.steward is not None:
                try:
                    out = ray.get(self.steward.stop_sampling.remote(self.spec.cell_id), timeout=120)
                    self.telemetry = out["rows"]
                except Exception as exc:  # noqa: BLE001
                    log.warning("cell=%s telemetry lost: %s", self.spec.cell_id, exc)
        finally:
            # Even when a second Ctrl-C lands in the steps above: the trainers go, the MPS daemon
            # stops (or the MIG layout is restored) and the GPU is free again.
            for trainer in self.trainers.values():
                ray.kill(trainer, no_restart=True)
            if self.steward is not None and self.gpu is not None:
                ray.get(self.steward.release.remote(self.spec.cell_id), timeout=120)
            if self.lease is not None:
                self.lease.release()


def _job_rows(spec: CellSpec, cell: _Cell) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs, epochs = [], []
    for job in spec.jobs:
        state = cell.states.get(job.index) or {"status": "error", "error": cell.reason or "not started", "info": {},
                                               "epochs": []}
        info, eps = state.get("info", {}), state.get("epochs", [])
        for e in eps:
            epochs.append({"cell_id": spec.cell_id, "job_index": job.index, **e})
        measured = [e for e in eps if not e["warmup"]]
        e2 = next((e for e in eps if e["epoch"] == 2), None)
        peaks = [e["peak_mem_allocated_mib"] for e in eps if e.get("peak_mem_allocated_mib") is not None]
        reserved = [e["peak_mem_reserved_mib"] for e in eps if e.get("peak_mem_reserved_mib") is not None]
        jobs.append({
            "cell_id": spec.cell_id, "job_index": job.index, "job_name": job.name, "workload": job.workload,
            "status": state["status"], "error": state.get("error"), "pid": info.get("pid"),
            "hostname": info.get("hostname"), "gpu_uuid": cell.gpu.uuid if cell.gpu else None,
            "mig_uuid": info.get("mig_uuid"), "mig_profile": info.get("mig_profile"),
            "cuda_visible_devices": info.get("cuda_visible_devices"), "cpus": info.get("cpus"),
            "mps_client": info.get("mps_client"),
            "mps_server_pid": info.get("mps_server_pid"), "batch_size": job.batch_size, "epochs": job.epochs,
            "epoch_samples": job.epoch_samples, "params": info.get("params"), "setup_s": info.get("setup_s"),
            "compile_s": info.get("compile_s"), "total_s": sum(e["wall_s"] for e in eps) if eps else None,
            "measured_s": sum(e["wall_s"] for e in measured) if measured else None,
            "epoch2_s": e2["wall_s"] if e2 else None, "epoch2_samples_per_s": e2["samples_per_s"] if e2 else None,
            "peak_mem_allocated_mib": max(peaks) if peaks else None,
            "peak_mem_reserved_mib": max(reserved) if reserved else None, "nvml_mem_mib": info.get("nvml_mem_mib"),
            "compile": job.trainer.compile, "amp": job.trainer.amp, "channels_last": job.trainer.channels_last,
            "allocator": job.trainer.allocator, "data_source": job.data.source, "data_placement": job.data.placement,
        })
    return jobs, epochs


def _window_stats(rows: list[dict[str, Any]], start: float | None, end: float | None) -> dict[str, Any]:
    """Summaries of the GPU-level telemetry inside the measured window."""
    gpu = [r for r in rows if r["scope"] == "gpu" and start is not None and end is not None and start <= r["ts"] <= end]

    def vals(key: str) -> list[float]:
        return [float(r[key]) for r in gpu if r.get(key) is not None]

    def mean(key: str) -> float | None:
        v = vals(key)
        return sum(v) / len(v) if v else None

    energy = vals("energy_mj")
    sm = vals("sm_active")
    mem = vals("mem_used_mib")
    duration = (gpu[-1]["ts"] - gpu[0]["ts"]) if len(gpu) > 1 else None
    energy_j = (energy[-1] - energy[0]) / 1000.0 if len(energy) > 1 else None
    return {
        "sm_active_mean": mean("sm_active"), "sm_active_max": max(sm) if sm else None,
        "gpu_util_mean": mean("gpu_util"), "mem_used_max_mib": max(mem) if mem else None, "energy_j": energy_j,
        "power_mean_w": energy_j / duration if energy_j is not None and duration else mean("power_w"),
        "pcie_rx_mean_bytes_s": mean("pcie_rx_bytes_s"), "pcie_tx_mean_bytes_s": mean("pcie_tx_bytes_s"),
    }


def _cell_row(cfg: Config, spec: CellSpec, cell: _Cell, jobs: list[dict[str, Any]], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [e for e in epochs if not e["warmup"]]
    e2 = [e for e in measured if e["epoch"] == 2]
    start = min((e["start_ts"] for e in measured), default=None)
    end = max((e["end_ts"] for e in measured), default=None)
    spans: dict[int, tuple[float, float]] = {}  # job -> (first measured start, last measured end)
    for e in measured:
        first, last = spans.get(e["job_index"], (e["start_ts"], e["end_ts"]))
        spans[e["job_index"]] = (min(first, e["start_ts"]), max(last, e["end_ts"]))
    overlap = max(0.0, min(b for _, b in spans.values()) - max(a for a, _ in spans.values())) if spans else None
    n_ok = sum(1 for j in jobs if j["status"] == "ok")
    statuses = {j["status"] for j in jobs}
    status = cell.status
    if status == "ok" and n_ok < len(jobs):
        status = "partial" if n_ok else ("oom" if statuses == {"oom"} else "error")
    reason = cell.reason or "; ".join(f"job {j['job_index']}: {j['error']}" for j in jobs if j["error"]) or None
    gpu = cell.gpu
    env = environment(gpu)
    return {
        "cell_id": spec.cell_id, "label": spec.label, "config_hash": spec.config_hash, "status": status,
        "reason": reason, "mode": spec.mode.name, "degree": spec.degree, "workload": spec.workloads,
        "mix": spec.mix_name, "gpu_uuid": gpu.uuid if gpu else None, "gpu_name": gpu.name if gpu else None,
        "gpu_index": gpu.index if gpu else None, "gpu_memory_mib": gpu.memory_mib if gpu else None,
        "gpu_sm_count": gpu.sm_count if gpu else None, "node_id": cell.lease.node_id if cell.lease else None,
        "hostname": jobs[0]["hostname"] if jobs and jobs[0]["hostname"] else socket.gethostname(),
        "backend": gpu.backend if gpu else cfg.cluster.backend, "driver": gpu.driver if gpu else None,
        "telemetry_source": cell.source, "started_at": cell.t_start, "finished_at": time.time(),
        "lease_wait_s": cell.lease.waited_s if cell.lease else None, "prepare_s": cell.prepare_s,
        # Trainer actors started and set up (CUDA, model, data); the cell's release, MPS daemon stopped.
        "setup_s": cell.setup_s, "teardown_s": cell.teardown_s,
        "measured_start_ts": start, "measured_end_ts": end, "makespan_s": (end - start) if start else None,
        # Wall time from the first epoch's start (warm-up included) to the last epoch's end.
        "overlap_s": overlap, "total_s": (max(e["end_ts"] for e in epochs) - min(e["start_ts"] for e in epochs))
        if epochs else None,
        # The study's metric: epoch-2 throughput of every job, summed (their epochs overlap).
        "agg_samples_per_s": sum(e["samples_per_s"] for e in e2) if e2 else None,
        "window_samples_per_s": sum(e["samples"] for e in measured) / (end - start) if start and end > start else None,
        "n_jobs": len(jobs), "n_ok": n_ok, **_window_stats(cell.telemetry, start, end), "resumed_from": None,
        "config_json": json.dumps(dataclasses.asdict(cfg), default=str), "env_json": json.dumps(env, default=str),
        "tags_json": json.dumps(spec.tags),
    }


def run_cell(cfg: Config, spec: CellSpec, job_dir: str | Path) -> CellOutcome:
    """Run one cell and write its four tables into ``job_dir``; failures become rows."""
    job_dir = Path(job_dir)
    cell = _Cell(cfg, spec, job_dir)
    interrupted = False
    try:
        cell.run()
    except KeyboardInterrupt:
        interrupted = True
        raise
    except Exception as exc:  # noqa: BLE001 - a cell that cannot succeed is a result
        cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None else exc
        log.error("cell=%s failed: %s: %s", spec.cell_id, type(cause).__name__, cause)
        cell.status, cell.reason = "error", f"{type(cause).__name__}: {cause}"[:4000]
    finally:
        try:
            cell.finish(interrupted)
        except Exception as exc:  # noqa: BLE001
            log.exception("cell=%s release failed", spec.cell_id)
            cell.reason = (cell.reason or "") + f"; release failed: {exc}"
        # An interrupted cell is not a result: nothing is written, and resume runs it again.
        if not interrupted:
            jobs, epochs = _job_rows(spec, cell)
            row = _cell_row(cfg, spec, cell, jobs, epochs)
            write_cell(job_dir, {"cells": [row], "jobs": jobs, "epochs": epochs, "telemetry": cell.telemetry})
    progress.report(spec.cell_id, state="done", status=row["status"])
    return CellOutcome(row, jobs, epochs, cell.telemetry, job_dir)
