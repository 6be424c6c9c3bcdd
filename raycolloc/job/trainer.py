"""The trainer actor: one per job. It starts the job's training process (``raycolloc.job.process``)
and relays the cell's calls to it: setup, epochs, finish. While the process trains, the actor
publishes its progress: a ``ray.util.metrics`` gauge, and the sweep's part of the cluster's progress board.

Failures are results: an OOM or any exception in the job is returned as ``status=oom|error``,
and a training process that dies (a crash, ``trainer.fault=exit``) as ``status=error``, "training
process ... died", with the epochs it finished before; never raised, so the cell goes on.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import ray

from raycolloc.gauges import make_gauge
from raycolloc.job.spawn import TrainingProcess, start_training_process
from raycolloc.procs import cache_env, move_threads_off, normal_priority, python_env, quiet_exit_in_finalizers
from raycolloc.spec import Binding, JobProgress, JobSpec, JobState

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


class Trainer:
    """A trainer actor: it runs one job at a time, each in a training process of its own.

    A lane keeps its trainers from cell to cell (``raycolloc.driver.trainers``): :meth:`start` gives
    it a job and starts the job's training process (forked by the node's warm parent, or exec'd: see
    ``raycolloc.job.spawn``) with the binding's environment (CUDA_VISIBLE_DEVICES, MPS pipe,
    allocator) and, pinned, on the job's cores with all of its threads; this actor's own threads move
    off them. :meth:`finish` ends the job and its process. The actor itself never imports torch nor
    changes its own environment, so nothing of one job reaches the next.
    """

    def __init__(self) -> None:
        normal_priority()  # the training processes it starts inherit it
        quiet_exit_in_finalizers()
        self.job: JobSpec | None = None
        self.board: Any = None
        self._proc: TrainingProcess | None = None
        self._conn: Connection | None = None
        self._state = JobState()
        self._gauge: Any = None
        self._t_start = 0.0

    def start(self, job: JobSpec, binding: Binding, board: Any = None, forkserver: str | None = None) -> int:
        """Start ``job``'s training process; returns its pid.

        Args:
            job: what to train.
            binding: how the job is bound to its GPU, and the device it calls (from the steward).
            board: the sweep's part of the progress board (``raycolloc.driver.progress.Board``), or None.
            forkserver: the node's fork server socket (``trainer.spawn=fork``), or None to exec.
        """
        if self._proc is not None:
            raise RuntimeError(f"{self!r} still runs a job; finish it first")
        self._t_start = time.perf_counter()
        env = {**os.environ, **binding.env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if job.trainer.allocator == "cuda_async":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
        cache_env(env, job.trainer.compile_cache)  # one compile cache per node
        self.job, self.board, self._state = job, board, JobState()
        if binding.cpus or binding.reserved_cpus:
            move_threads_off(binding.cpus or (), onto=binding.reserved_cpus)
        self._proc, self._conn = start_training_process(job.name, python_env(env), forkserver)
        self._conn.send((job, binding))  # the protocol's first message (raycolloc.job.process)
        return self._proc.pid

    def __repr__(self) -> str:
        # Ray prefixes every log line of an actor with its repr: the cell and the job it runs.
        return f"Trainer({self.job.cell_id}/{self.job.name})" if self.job else "Trainer(idle)"

    def placement(self) -> tuple[str, str]:
        """The node and the GPU (Ray's id for it) this actor was placed on: its lane's lease."""
        ids = ray.get_gpu_ids()
        gpu = ids[0] if ids else os.environ.get("CUDA_VISIBLE_DEVICES", "0")
        return ray.get_runtime_context().get_node_id(), str(gpu)

    def inspect(self) -> dict[str, Any]:
        """What this actor process holds (tests, tools): its pid, open files, CUDA environment,
        whether torch was ever imported here."""
        return {
            "pid": os.getpid(),
            "fds": sorted(os.listdir("/proc/self/fd")),
            "cuda_env": {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "PYTORCH_CUDA"))},
            "torch_imported": "torch" in sys.modules,
            "job": self.job.name if self.job else None,
        }

    # --- lifecycle (each returns the job's state; never raises for training errors) ----------
    def setup(self) -> JobState:
        """Build model, optimiser and data on the device; returns the job's state and info."""
        t0 = time.perf_counter()
        state = self._call("setup")
        # From the actor's start of the call: the training process's imports count too.
        state.info.setup_s = time.perf_counter() - t0
        return state

    def run_epochs(self, first: int, last: int) -> JobState:
        """Train epochs ``first..last`` (1-based, inclusive); stops at the first failure."""
        return self._call("run", first, last)

    def finish(self) -> JobState:
        """Final record of the job; the training process frees the device and exits, and this actor
        is free for another job."""
        state = self._call("finish")
        assert self._proc is not None and self._conn is not None
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._conn.close()
        self._proc = self._conn = None
        return state

    # --- internals ---------------------------------------------------------------------------
    def _call(self, command: str, *args: Any) -> JobState:
        assert self._proc is not None and self._conn is not None, "start a job first"
        if not self._state.ok and self._proc.poll() is not None:
            return self._state
        try:
            self._conn.send((command, *args))
            while True:
                kind, payload = self._conn.recv()
                if kind == "state":
                    # What only the actor knows (the process's start) survives the process's report.
                    known = self._state.info
                    self._state = payload
                    info = self._state.info
                    info.setup_s, info.spawn_s, info.import_s = known.setup_s, known.spawn_s, known.import_s
                    info.spawn = info.spawn or known.spawn
                    info.actor_pid = os.getpid()
                    return self._state
                if kind == "ready":  # the process started and imported torch and timm
                    self._state.info.spawn_s = time.perf_counter() - self._t_start
                    self._state.info.import_s = payload
                elif kind == "progress":
                    self._publish(payload)
                elif kind == "epoch":
                    self._state.epochs.append(payload)
        except (EOFError, OSError):
            pass
        try:
            code: Any = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = "none (killed)"
        pid = self._state.info.pid or self._proc.pid
        self._state.failed("error", f"training process {pid} died (exit code {code})")
        log.error("%s", self._state.error)
        return self._state

    def _publish(self, progress: JobProgress) -> None:
        assert self.job is not None
        if self._gauge is None:
            self._gauge = make_gauge(
                "raycolloc_job_samples_per_s", "Samples per second of a raycolloc job", ("cell", "job_name")
            )
        self._gauge.set(progress.samples_per_s, tags={"cell": self.job.cell_id, "job_name": self.job.name})
        if self.board is not None:
            # Fire and forget: the driver draws it; a lost update is redrawn a second later.
            self.board.job(self.job.cell_id, self.job.index, progress)
