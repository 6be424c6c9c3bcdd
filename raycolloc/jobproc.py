"""The training process of one job: a plain Python process, started by its ``Trainer`` actor.

Why a process of its own: the same training loop run as a Ray actor's method was 6-14% slower
than a plain process at degree 1 (H100, resnet26 eager, best of two: 15,521 vs 18,047 img/s naive,
16,975 vs 18,091 MPS), its thread using 5-15% more CPU time per step. Neither the steward, the
sampler, niceness, environment, garbage collector, thread pool nor the step code explained it; what
remained was the Ray core worker sharing the process with a loop bound by one CPU thread launching
kernels. Here the loop shares its process with nothing; the actor only relays commands, progress
and (simulated GPUs) memory requests. On one H100 host afterwards, four repeats each, the best
degree-1 runs were 18,608 vs raw 15,850 (naive) and 18,692 vs 18,512 (MPS), at the same CPU time
per step (docs/measurements.md, fifth session).

Protocol over one ``multiprocessing`` connection (pickled tuples), parent -> child: first
``(job, binding, backend)``, then ``("setup",)``, ``("run", first, last)``, ``("finish",)``, each
answered by ``("state", state)``.
While working the child sends ``("progress", dict)`` about once a second, ``("epoch", record)``
after each epoch, and on simulated GPUs ``("sim_attach", gpu_uuid, mig_uuid, pid, bytes, threads)``,
answered by ``("attached", None)`` or ``("attached", (is_oom, message))``.

Failures are results: an OOM or any exception is returned as ``status=oom|error`` with the
message, never raised, so the cell goes on and writes its rows.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import resource
import signal
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from raycolloc.cellspec import Binding, JobSpec
from raycolloc.cpus import format_cpus
from raycolloc.modes.mps import mps_client_status
from raycolloc.priority import normal_priority

__all__ = ["COMPILE_CACHE", "JobProcess", "classify_error", "main"]

log = logging.getLogger(__name__)
COMPILE_CACHE = Path(os.environ.get("RAYCOLLOC_COMPILE_CACHE", "/tmp/raycolloc-compile-cache"))
REPORT_EVERY_S = 1.0
_PR_SET_PDEATHSIG = 1


def classify_error(exc: BaseException) -> str:
    """``oom`` for every flavour of device out-of-memory, ``error`` otherwise."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return "oom"
    text = str(exc)
    if "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text:
        return "oom"
    return "error"


class JobProcess:
    """One job's model, optimiser, data and epochs, in the process that trains them."""

    def __init__(self, job: JobSpec, binding: Binding, backend: str, conn: Connection) -> None:
        self.job, self.binding, self.backend, self.conn = job, binding, backend, conn
        self.pid = os.getpid()
        self.epochs: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {"pid": self.pid, "hostname": socket.gethostname(),
                                     "mig_uuid": binding.mig_uuid, "mig_profile": binding.mig_profile,
                                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                     "niceness": os.getpriority(os.PRIO_PROCESS, 0), "compile_s": None}
        if binding.cpus:
            # What the training thread really runs on: the jobs table's ``cpus``.
            self.info["cpus"] = format_cpus(sorted(os.sched_getaffinity(0)))
        self.status, self.error = "ok", None
        self._progress: dict[str, Any] = {"epoch": 0, "step": 0, "steps": job.steps_per_epoch,
                                          "epochs": job.epochs, "batch_size": job.batch_size}
        self._next_report = 0.0

    # --- commands (each returns the job's state; never raises for training errors) -----------
    def setup(self) -> dict[str, Any]:
        """Build model, optimiser and data on the device; the state carries the job's info."""
        try:
            self._setup()
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded as a row
            self._fail(exc)
        return self.state()

    def run_epochs(self, first: int, last: int) -> dict[str, Any]:
        """Train epochs ``first..last`` (1-based, inclusive); stops at the first failure."""
        if self.status != "ok":
            return self.state()
        try:
            for epoch in range(first, last + 1):
                self._run_epoch(epoch)
        except BaseException as exc:  # noqa: BLE001
            self._fail(exc)
        return self.state()

    def finish(self) -> dict[str, Any]:
        """Final record of the job; frees the device memory it held."""
        self._release()
        return self.state()

    def state(self) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "info": dict(self.info), "epochs": list(self.epochs)}

    # --- internals -------------------------------------------------------------------------
    def _setup(self) -> None:
        import torch

        from raycolloc.data.sources import build_source
        from raycolloc.step import build_step
        from raycolloc.workloads.registry import create_workload

        job = self.job
        torch.manual_seed(job.seed)
        if self.backend == "sim":
            self.device = torch.device("cpu")
            torch.set_num_threads(job.trainer.torch_threads or max(1, int(job.trainer.num_cpus)))
        else:
            if not torch.cuda.is_available():
                raise RuntimeError(f"CUDA sees no GPU with CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
            self.device = torch.device("cuda", 0)
            torch.cuda.set_device(self.device)
            self.info["device_name"] = torch.cuda.get_device_name(0)
            if job.trainer.torch_threads:
                torch.set_num_threads(job.trainer.torch_threads)
        self.spec = create_workload(job.workload)
        model = self.spec.build_model()
        self.info["params"] = sum(p.numel() for p in model.parameters())
        if self.backend == "sim":
            self._sim_attach(torch.get_num_threads())
        self.step = build_step(self.spec, model, self.device, job.trainer)
        self.source = build_source(self.spec, job.batch_size, self.device, job.data.source, job.data.placement,
                                   job.data.path, job.data.num_workers, job.seed,
                                   limit=job.epoch_samples if job.data.source == "real" else None)
        self.info["h2d_bytes_per_step"] = self.source.bytes_per_batch if job.data.placement == "host" else 0
        self._sync()
        self.info.update(mps_client_status(self.binding, self.pid))

    def _sim_attach(self, threads: int) -> None:
        """The simulated GPU accounts this job's memory (through the steward, which the actor
        reaches) and refuses it when the GPU is full."""
        from raycolloc.gpu.sim_mps import sim_cuda_connect

        need = max(self.info["params"] * 16,
                   int(self.spec.memory_gib * (1 << 30) * self.job.batch_size / self.spec.batch_size))
        sim_cuda_connect(self.pid)  # as CUDA's initialisation joins an MPS daemon if one answers
        self.conn.send(("sim_attach", self.binding.gpu_uuid, self.binding.mig_uuid, self.pid, need, threads))
        kind, failure = self.conn.recv()
        assert kind == "attached", kind
        if failure is not None:
            is_oom, message = failure
            raise (MemoryError if is_oom else RuntimeError)(message)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()

    @contextmanager
    def _compile_lock(self):  # noqa: ANN202
        """Jobs on a node compile one at a time, so the first fills the shared cache for the rest."""
        key = hashlib.sha1(f"{self.job.workload}{self.job.batch_size}{self.job.trainer}".encode()).hexdigest()[:12]
        with open(COMPILE_CACHE / f"compile-{key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run_epoch(self, epoch: int) -> None:
        import torch

        job, steps = self.job, self.job.steps_per_epoch
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if self.step.compiled and self.info["compile_s"] is None:
            # Compile inside the warm-up epoch, timed on its own (never inside a measured epoch).
            with self._compile_lock():
                t = time.perf_counter()
                self._last_loss = self.step(*self.source.next())
                self._sync()
                self.info["compile_s"] = time.perf_counter() - t
        fault_step = steps // 2 if job.trainer.fault and job.trainer.fault_job == job.index and job.trainer.fault_epoch == epoch else -1
        self._progress.update(epoch=epoch, step=0)
        # Why sync: start the clock with an empty queue, so the epoch's time is its own work only.
        self._sync()
        usage0 = _thread_usage()
        start_wall, t0 = time.time(), time.perf_counter()
        for step in range(steps):
            if step == fault_step:
                self._inject_fault()
            self._last_loss = self.step(*self.source.next())
            if time.monotonic() >= self._next_report:
                self._report(epoch, step, t0)
        # Why sync: kernels run asynchronously; the epoch ends when the GPU finishes its last step.
        self._sync()
        wall = time.perf_counter() - t0
        usage = {k: v - usage0[k] for k, v in _thread_usage().items()}
        samples = steps * job.batch_size
        record = {
            "epoch": epoch, "warmup": epoch == 1, "start_ts": start_wall, "end_ts": start_wall + wall,
            "wall_s": wall, "samples": samples, "samples_per_s": samples / wall,
            "loss": float(self._last_loss), "steps": steps,
            # The training thread's CPU time (user + system): near wall_s means the job is bound by
            # its CPU thread; system time and page faults show time spent in the kernel.
            **usage,
            "peak_mem_allocated_mib": None, "peak_mem_reserved_mib": None,
        }
        if self.device.type == "cuda":
            record["peak_mem_allocated_mib"] = torch.cuda.max_memory_allocated() / (1 << 20)
            record["peak_mem_reserved_mib"] = torch.cuda.max_memory_reserved() / (1 << 20)
        self.epochs.append(record)
        self.conn.send(("epoch", record))
        self._report(epoch, steps, t0)

    def _report(self, epoch: int, step: int, t0: float) -> None:
        self._next_report = time.monotonic() + REPORT_EVERY_S
        elapsed = max(time.perf_counter() - t0, 1e-9)
        self._progress.update(epoch=epoch, step=step, samples_per_s=step * self.job.batch_size / elapsed)
        self.conn.send(("progress", dict(self._progress)))

    def _inject_fault(self) -> None:
        import torch

        kind = self.job.trainer.fault
        if kind == "oom":
            raise torch.OutOfMemoryError(f"injected out of memory (trainer.fault=oom, job {self.job.index})")
        if kind == "exit":
            os._exit(3)  # a crash: the process dies without a word
        if kind == "hang":
            time.sleep(10**6)
        raise RuntimeError(f"injected error (trainer.fault=error, job {self.job.index})")

    def _fail(self, exc: BaseException) -> None:
        self.status = classify_error(exc)
        self.error = f"{type(exc).__name__}: {exc}"
        log.error("status=%s error=%s", self.status, self.error)
        self.info["traceback"] = traceback.format_exc(limit=20)
        self._release()

    def _release(self) -> None:
        for attr in ("step", "source"):
            if hasattr(self, attr):
                delattr(self, attr)
        if getattr(self, "device", None) is not None and self.device.type == "cuda":
            import torch

            self.info.setdefault("nvml_mem_mib", _own_nvml_memory(self.binding, self.pid))
            torch.cuda.empty_cache()


def _thread_usage() -> dict[str, float]:
    """CPU time (user + system), system time, minor page faults and context switches (involuntary:
    pre-empted; voluntary: it waited, e.g. for the GIL or a lock) of the calling thread so far
    (``getrusage(RUSAGE_THREAD)``, Linux; CPU time alone elsewhere)."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        return {"thread_cpu_s": time.thread_time()}
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return {"thread_cpu_s": r.ru_utime + r.ru_stime, "thread_sys_s": r.ru_stime, "minor_faults": r.ru_minflt,
            "involuntary_switches": r.ru_nivcsw, "voluntary_switches": r.ru_nvcsw}


def _own_nvml_memory(binding: Binding, pid: int) -> float | None:
    """Memory NVML attributes to this process (None where NVML hides it, e.g. MPS clients or MIG)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(binding.mig_uuid or binding.gpu_uuid)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == pid and p.usedGpuMemory is not None:
                    return p.usedGpuMemory / (1 << 20)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - best effort, absent on many setups
        return None
    return None


def _die_with_parent(parent: int) -> None:
    """Killed with SIGKILL when the actor's process ends (Linux), also when Ray kills the actor."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the actor ended before prctl took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    """``python -m raycolloc.jobproc FD PARENT_PID``: serve one job over the connection on FD."""
    fd, parent = (int(a) for a in (argv or sys.argv[1:]))
    _die_with_parent(parent)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    conn = Connection(fd)
    job, binding, backend = conn.recv()
    if binding.cpus:
        # Before torch starts a thread: every thread of this process inherits the job's cores.
        os.sched_setaffinity(0, binding.cpus)
    normal_priority()
    COMPILE_CACHE.mkdir(parents=True, exist_ok=True)
    import torch  # noqa: F401 - while the actor waits for its first command

    proc = JobProcess(job, binding, backend, conn)
    while True:
        try:
            command, *args = conn.recv()
        except EOFError:
            return
        if command == "setup":
            conn.send(("state", proc.setup()))
        elif command == "run":
            conn.send(("state", proc.run_epochs(*args)))
        elif command == "finish":
            conn.send(("state", proc.finish()))
            # Straight out: the interpreter's own shutdown (torch's modules, CUDA's context) took
            # about a second of every cell's teardown; the kernel and the driver free it all.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        else:
            raise ValueError(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
