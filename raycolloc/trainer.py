"""The trainer actor: one per job. It starts the job's training process (``raycolloc.jobproc``)
and relays the cell's calls to it: setup, epochs, finish. While the process trains, the actor
publishes its progress (a ``ray.util.metrics`` gauge and the steward's progress table) and, on
simulated GPUs, asks the steward for the job's memory.

Failures are results: an OOM or any exception in the job is returned as ``status=oom|error``,
and a training process that dies (a crash, ``trainer.fault=exit``) as ``status=error``, "training
process ... died", with the epochs it finished before; never raised, so the cell goes on.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import raycolloc
from raycolloc.cellspec import Binding, JobSpec
from raycolloc.cpus import move_threads_off
from raycolloc.jobproc import COMPILE_CACHE
from raycolloc.metrics import make_gauge
from raycolloc.priority import normal_priority

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


class Trainer:
    """One job. Created by the cell inside its GPU lease; see ``raycolloc.cell``.

    The training process starts at once (it imports torch while the cell creates the other
    trainers), with the binding's environment (CUDA_VISIBLE_DEVICES, MPS pipe, allocator) and,
    pinned, on the job's cores with all of its threads; this actor's own threads move off them.
    """

    def __init__(self, job: JobSpec, binding: Binding, cell_id: str, backend: str, steward: Any) -> None:
        normal_priority()  # the training process inherits it
        env = {**os.environ, **binding.env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if job.trainer.allocator == "cuda_async":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        # One inductor cache per node: identical jobs reuse each other's compiled kernels.
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(COMPILE_CACHE / "inductor"))
        env.setdefault("TRITON_CACHE_DIR", str(COMPILE_CACHE / "triton"))
        package_root = str(Path(raycolloc.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.job, self.cell_id, self.steward = job, cell_id, steward
        if binding.cpus:
            move_threads_off(binding.cpus)
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen([sys.executable, "-m", "raycolloc.jobproc", str(theirs.fileno()),
                                           str(os.getpid())], env=env, pass_fds=(theirs.fileno(),))
        self._conn = Connection(ours.detach())
        self._conn.send((job, binding, backend))
        self._state: dict[str, Any] = {"status": "ok", "error": None, "info": {}, "epochs": []}
        self._gauge: Any = None

    def __repr__(self) -> str:
        # Ray prefixes every log line of an actor with its repr: the cell and the job.
        return f"Trainer({self.cell_id}/{self.job.name})"

    # --- lifecycle (each returns the job's state; never raises for training errors) ----------
    def setup(self) -> dict[str, Any]:
        """Build model, optimiser and data on the device; returns the job's info."""
        t0 = time.perf_counter()
        state = self._call("setup")
        # From the actor's start of the call: the training process's imports count too.
        state["info"]["setup_s"] = self._state["info"]["setup_s"] = time.perf_counter() - t0
        return state

    def run_epochs(self, first: int, last: int) -> dict[str, Any]:
        """Train epochs ``first..last`` (1-based, inclusive); stops at the first failure."""
        return self._call("run", first, last)

    def finish(self) -> dict[str, Any]:
        """Final record of the job; the training process frees the device and exits."""
        state = self._call("finish")
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        return state

    # --- internals ---------------------------------------------------------------------------
    def _call(self, command: str, *args: Any) -> dict[str, Any]:
        if self._state["status"] != "ok" and self._proc.poll() is not None:
            return self._snapshot()
        try:
            self._conn.send((command, *args))
            while True:
                kind, *payload = self._conn.recv()
                if kind == "state":
                    self._state = {**payload[0], "info": {**self._state["info"], **payload[0]["info"]}}
                    return self._snapshot()
                if kind == "progress":
                    self._publish(payload[0])
                elif kind == "epoch":
                    self._state["epochs"].append(payload[0])
                elif kind == "sim_attach":
                    self._sim_attach(*payload)
        except (EOFError, OSError):
            pass
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = "none (killed)"
        pid = self._state["info"].get("pid", self._proc.pid)
        self._state.update(status="error", error=f"training process {pid} died (exit code {code})")
        log.error("%s", self._state["error"])
        return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        s = self._state
        return {**s, "info": dict(s["info"]), "epochs": list(s["epochs"])}

    def _sim_attach(self, gpu_uuid: str, mig_uuid: str | None, pid: int, mem_bytes: int, threads: int) -> None:
        import ray

        failure = None
        try:
            ray.get(self.steward.sim_attach.remote(gpu_uuid, mig_uuid, pid, mem_bytes, threads), timeout=60)
        except Exception as exc:  # noqa: BLE001 - the job records it as its failure
            cause = getattr(exc, "cause", None) or exc
            failure = (isinstance(cause, MemoryError), f"{type(cause).__name__}: {cause}")
        self._conn.send(("attached", failure))

    def _publish(self, progress: dict[str, Any]) -> None:
        if self._gauge is None:
            self._gauge = make_gauge("raycolloc_job_samples_per_s", "Samples per second of a raycolloc job",
                                     ("cell", "job_name"))
        self._gauge.set(progress.get("samples_per_s", 0.0), tags={"cell": self.cell_id, "job_name": self.job.name})
        if self.steward is not None:
            # Fire and forget: the steward shows progress and, when simulated, derives telemetry.
            self.steward.report.remote(self.cell_id, self.job.index, self._state["info"].get("pid", self._proc.pid),
                                       progress, self._state["info"].get("h2d_bytes_per_step", 0))
