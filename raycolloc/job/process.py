"""The training process of one job: a plain Python process, started by its ``Trainer`` actor.

Why a process of its own: the same training loop run as a Ray actor's method was 6-14% slower
than a plain process at degree 1 (H100, resnet26 eager, best of two: 15,521 vs 18,047 img/s naive,
16,975 vs 18,091 MPS), its thread using 5-15% more CPU time per step. Neither the steward, the
sampler, niceness, environment, garbage collector, thread pool nor the step code explained it; what
remained was the Ray core worker sharing the process with a loop bound by one CPU thread launching
kernels. Here the loop shares its process with nothing; the actor only relays commands and
progress. On one H100 host afterwards, four repeats each, the best degree-1 runs were 18,608 vs
raw 15,850 (naive) and 18,692 vs 18,512 (MPS), at the same CPU time per step
(docs/measurements.md, fifth session).

Protocol over one ``multiprocessing`` connection (pickled tuples), parent -> child: first
``(job, binding)``, then ``("setup",)``, ``("run", first, last)``, ``("finish",)``, each
answered by ``("state", JobState)``. While working the child sends ``("progress", JobProgress)`` about
once a second and ``("epoch", EpochRow)`` after each epoch.

Failures are results: an OOM or any exception is returned as ``status=oom|error`` with the
message, never raised, so the cell goes on and writes its rows.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import Connection

# Nothing imported at module level may start a thread: main() pins the whole process to the job's
# cores first, and only threads started after that inherit them (pyarrow, for one, starts two).
from raycolloc.job.epoch import EpochTimes, epoch_row, inject_fault
from raycolloc.job.joblog import output_to, said
from raycolloc.job.measure import own_nvml_memory, thread_usage
from raycolloc.job.windows import EpochWindows, clock_for
from raycolloc.mpsctl import client_status
from raycolloc.procs import compile_cache, die_with_parent, format_cpus, normal_priority, watch_parent
from raycolloc.spec import Binding, JobInfo, JobProgress, JobSpec, JobState, JobStatus
from raycolloc.workload_kinds import ModelWorkload, PythonWorkload

__all__ = ["JobProcess", "classify_error", "main"]

log = logging.getLogger(__name__)


REPORT_EVERY_S = 1.0


def classify_error(exc: BaseException) -> JobStatus:
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

    def __init__(self, job: JobSpec, binding: Binding, conn: Connection) -> None:
        self.job, self.binding, self.conn = job, binding, conn
        self.gpu = binding.device  # the node's backend chose it: a real GPU, or a simulated one
        self.pid = os.getpid()
        info = JobInfo(
            pid=self.pid,
            hostname=socket.gethostname(),
            mig_uuid=binding.mig_uuid,
            mig_profile=binding.mig_profile,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            mps_pipe_dir=os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
            niceness=os.getpriority(os.PRIO_PROCESS, 0),
            started_ts=time.time(),
        )
        if binding.cpus:
            # What the training thread really runs on: the jobs table's ``cpus``.
            info.cpus = format_cpus(sorted(os.sched_getaffinity(0)))
        self.state = JobState(info=info)
        self._progress = JobProgress(epoch=0, step=0, steps=job.steps_per_epoch, epochs=job.epochs)
        self._next_report = 0.0

    # --- commands (each returns the job's state; never raises for training errors) -----------
    def setup(self) -> JobState:
        """Build model, optimiser and data on the device; the state carries the job's info."""
        try:
            self._setup()
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded as a row
            self._fail(exc)
        return self.state

    def run_epochs(self, first: int, last: int) -> JobState:
        """Train epochs ``first..last`` (1-based, inclusive); stops at the first failure."""
        if not self.state.ok:
            return self.state
        try:
            for epoch in range(first, last + 1):
                self._run_epoch(epoch)
        except BaseException as exc:  # noqa: BLE001
            self._fail(exc)
        return self.state

    def finish(self) -> JobState:
        """Final record of the job; frees the device memory it held."""
        self._release()
        return self.state

    # --- internals -------------------------------------------------------------------------
    def _setup(self) -> None:
        import torch

        job, info = self.job, self.state.info
        torch.manual_seed(job.seed)
        t0 = time.perf_counter()
        if not self.gpu.cuda:  # the CPU stands in for a simulated GPU
            self.device = torch.device("cpu")
            torch.set_num_threads(job.trainer.torch_threads or max(1, int(job.trainer.num_cpus)))
        else:
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"CUDA sees no GPU with CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}"
                )
            self.device = torch.device("cuda", 0)
            torch.cuda.set_device(self.device)
            torch.cuda.init()  # the context now, so its cost is timed here, not in the model's transfer
            info.device_name = torch.cuda.get_device_name(0)
            if job.trainer.torch_threads:
                torch.set_num_threads(job.trainer.torch_threads)
        t1 = time.perf_counter()
        # Each kind built by its own code; a script never reaches here (it is exec'd as written, job/script.py).
        if isinstance(job.workload, PythonWorkload):
            sim_s, t2 = self._setup_python()
        elif isinstance(job.workload, ModelWorkload):
            sim_s, t2 = self._setup_model(job.workload)
        else:
            raise TypeError(f"a training process runs no {type(job.workload).__name__}")
        self._sync()
        t3 = time.perf_counter()
        info.cuda_init_s, info.model_s, info.data_s = t1 - t0 + sim_s, t2 - t1 - sim_s, t3 - t2
        info.mps_client, info.mps_server_pid, info.mps_check_error = client_status(
            self.binding.mps_control, self.binding.mps_pipe_dir, self.pid
        )

    def _setup_model(self, spec: ModelWorkload) -> tuple[float, float]:
        """A workload raycolloc composes: its model, the study's step, synthetic or real batches.
        Returns the seconds spent in the device's driver (:meth:`_attach`) and the time the model was ready."""
        from raycolloc.job.data.sources import build_source
        from raycolloc.job.step import build_step

        job, info = self.job, self.state.info
        model = spec.build_model()
        info.params = sum(p.numel() for p in model.parameters())
        # A simulated context (memory accounted, MPS joined) needs the model's size first.
        sim_s = self._attach(self._estimate_bytes)
        step = build_step(spec, model, self.device, job.trainer)
        self._sync()
        t_model = time.perf_counter()
        source = build_source(
            spec,
            job.batch_size,
            self.device,
            job.data.source,
            job.data.placement,
            job.data.path,
            job.data.num_workers,
            job.seed,
            limit=job.epoch_samples if job.data.source == "real" else None,
        )
        info.h2d_bytes_per_step = source.bytes_per_batch if job.data.placement == "host" else 0
        self.compiled = step.compiled
        self.step = lambda: step(*source.next())
        return sim_s, t_model

    def _setup_python(self) -> tuple[float, float]:
        """The user's function builds the job (``workload=python``); raycolloc times its steps. Its
        model and data are built together: the data phase is what is left after (a synchronise)."""
        from raycolloc.job.workloads.user import build_user_run

        run = build_user_run(self.job, self.device)
        self.state.info.params = run.params
        # Weights, gradients, momentum and as much again for activations: 16 bytes a parameter.
        sim_s = self._attach(lambda: int(run.params or 0) * 16)
        self.compiled = run.compiled
        self.step = run.step
        return sim_s, time.perf_counter()

    def _estimate_bytes(self) -> int:
        """The job's device memory from its model (``raycolloc.job.workloads.estimate``); a model the
        meta device cannot run counts 16 bytes a parameter (weights, gradients, momentum, as much again)."""
        from raycolloc.job.workloads.estimate import job_estimate_mib

        mib = job_estimate_mib(self.job)
        return int(mib * (1 << 20)) if mib is not None else int(self.state.info.params or 0) * 16

    def _attach(self, need_bytes: Callable[[], int]) -> float:
        """The device's driver takes the job on (a simulated GPU: MPS joined if a daemon answers, the
        job's memory allocated, refused as an out-of-memory when the device is full; a real GPU:
        nothing, CUDA did it); returns the seconds it took."""
        import torch

        return self.gpu.attach(self.pid, need_bytes, torch.get_num_threads())

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()

    @contextmanager
    def _compile_lock(self) -> Iterator[None]:
        """Jobs on a node compile one at a time, so the first fills the shared cache for the rest."""
        key = hashlib.sha1(f"{self.job.workload.name}{self.job.batch_size}{self.job.trainer}".encode()).hexdigest()[:12]
        with open(compile_cache(self.job.trainer.compile_cache) / f"compile-{key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run_epoch(self, epoch: int) -> None:
        import torch

        job, steps, info = self.job, self.job.epoch_steps(epoch), self.state.info
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if self.compiled and info.compile_s is None:
            # Compile inside the warm-up epoch, timed on its own (never inside a measured epoch).
            with self._compile_lock():
                t = time.perf_counter()
                self._last_loss = self.step()
                self._sync()
                info.compile_s = time.perf_counter() - t
        trainer = job.trainer
        faulty = trainer.fault and trainer.fault_job == job.index and trainer.fault_epoch == epoch
        fault_step = steps // 2 if faulty else -1
        self._progress = replace(self._progress, epoch=epoch, step=0)
        # Why sync: start the clock with an empty queue, so the epoch's time is its own work only.
        self._sync()
        usage0 = thread_usage()
        start_wall, t0 = time.time(), time.perf_counter()
        # A measured epoch runs at least its floor (JobSpec.epoch_floor_s): a short one on a noisy host
        # moved by a third between sweeps. Steps launched, not finished, are what the clock sees here.
        floor_end = t0 + job.epoch_floor_s(epoch)
        # Window boundaries for the epoch's interval: events on a GPU, no synchronise (windows.py).
        windows = EpochWindows(clock_for(self.device), None if job.epoch_time_s or floor_end > t0 else steps)
        # A time budget (job.epoch_time_s) ends the epoch after the step that reaches it; the epoch's
        # time is still taken after the sync below, so it covers every step it launched.
        deadline = t0 + job.epoch_time_s if job.epoch_time_s else float("inf")
        # The fault comes half-way through the epoch's steps, or through its time budget where that ends
        # the epoch first (epoch_samples=1000000 epoch_time_s=8: the steps' half never came, issue 47).
        fault_at = (t0 + deadline) / 2
        done = 0
        while done < steps or time.perf_counter() < floor_end:
            if faulty and (done == fault_step or time.perf_counter() >= fault_at):
                inject_fault(job)
            self._last_loss = self.step()
            done += 1
            windows.step(done)
            if time.monotonic() >= self._next_report:
                self._report(epoch, done - 1, t0)
            if time.perf_counter() >= deadline:
                break
        windows.close(done)  # queued behind the last step: it completes with the sync below
        # Why sync: kernels run asynchronously; the epoch ends when the GPU finishes its last step.
        self._sync()
        wall = time.perf_counter() - t0
        usage = {k: v - usage0[k] for k, v in thread_usage().items()}
        cuda = self.device.type == "cuda"
        peaks = (
            (torch.cuda.max_memory_allocated() / (1 << 20), torch.cuda.max_memory_reserved() / (1 << 20))
            if cuda
            else None
        )
        record = epoch_row(
            job,
            epoch,
            EpochTimes(start_wall, wall, done, windows.windows()),
            None if self._last_loss is None else float(self._last_loss),
            usage,
            peaks,
        )
        self.state.epochs.append(record)
        self.conn.send(("epoch", record))
        self._report(epoch, done, t0)

    def _report(self, epoch: int, step: int, t0: float) -> None:
        self._next_report = time.monotonic() + REPORT_EVERY_S
        elapsed = max(time.perf_counter() - t0, 1e-9)
        rate = step * self.job.batch_size / elapsed
        # Past the epoch's steps (its floor, min_epoch_s), the progress line's total grows with it.
        total = max(self.job.epoch_steps(epoch), step)
        self._progress = replace(self._progress, epoch=epoch, step=step, steps=total, samples_per_s=rate)
        self.conn.send(("progress", self._progress))
        # A simulated GPU's PCIe counters add up what the jobs copy to their devices (NVML sees a real one's).
        self.gpu.report_h2d(self.pid, step / elapsed * self.state.info.h2d_bytes_per_step)

    def _fail(self, exc: BaseException) -> None:
        self.state.failed(classify_error(exc), f"{type(exc).__name__}: {exc}")
        log.error("status=%s error=%s", self.state.status, self.state.error)
        self.state.info.traceback = traceback.format_exc(limit=20)
        self._release()

    def _release(self) -> None:
        self.state.info.ended_ts = time.time()
        for attr in ("step",):
            if hasattr(self, attr):
                delattr(self, attr)
        if getattr(self, "device", None) is not None and self.device.type == "cuda":
            import torch

            if self.state.info.nvml_mem_mib is None:
                self.state.info.nvml_mem_mib = own_nvml_memory(self.binding, self.pid)
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> None:
    """``python -m raycolloc.job.process FD PARENT_PID``: serve one job over the connection on FD (the
    exec'd form; :mod:`raycolloc.job.forkserver` forks the same :func:`run` from a warm parent)."""
    fd, parent = (int(a) for a in (argv or sys.argv[1:]))
    die_with_parent(parent)
    run(Connection(fd), parent, forked=False)


def run(conn: Connection, actor_pid: int, forked: bool) -> None:
    """Be the training process of the job the actor sends first; serve its commands."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    job, binding = conn.recv()
    if job.log_path:
        output_to(job.log_path)
    if binding.cpus or binding.shared_cpus:
        # Before torch starts a thread: its threads inherit the job's cores (unpinned: all but the reserved).
        os.sched_setaffinity(0, binding.cpus or binding.shared_cpus or ())
    if forked:
        watch_parent(actor_pid)  # an exec'd process has PR_SET_PDEATHSIG instead
    normal_priority()
    compile_cache(job.trainer.compile_cache).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not forked:  # a forked process has what its warm parent preloaded (timm for real GPUs)
        import timm  # noqa: F401 - while the actor waits for its first command
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if forked and threads.isdigit() and int(threads) > 1:
        torch.set_num_threads(int(threads))  # the warm parent read OMP_NUM_THREADS=1 at its start
    conn.send(("ready", time.perf_counter() - t0))
    proc = JobProcess(job, binding, conn)
    proc.state.info.spawn = "fork" if forked else "exec"
    serve(proc, conn)


def serve(proc: JobProcess, conn: Connection) -> None:
    """Answer the actor's commands until ``finish`` (then leave at once) or the connection closes."""
    while True:
        try:
            command, *args = conn.recv()
        except EOFError:
            return
        if command == "setup":
            conn.send(("state", said(proc.job, proc.setup(), 0)))
        elif command == "run":
            conn.send(("state", said(proc.job, proc.run_epochs(*args), args[0])))
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
