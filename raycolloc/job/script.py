"""A script job (``workload=script``): the user's unmodified training process, bound and measured
from outside, as radT runs scripts.

The cell creates a :class:`ScriptTrainer` actor for each script job, exactly where it would create a
:class:`~raycolloc.job.trainer.Trainer`, with the same binding. ``setup`` starts the process (every
job's at once: a script cell has no warm-up barrier; each process runs as written) through a short
launcher (``python -m raycolloc.job.script_exec``) that pins itself to the binding's cores, restores
normal priority, dies with its actor, and ``exec``s the command: the job *is* the user's process,
with the binding's environment (``CUDA_VISIBLE_DEVICES`` = the GPU or MIG UUID, the MPS pipe).

What is measured without the script's cooperation: its start and exit (wall clock), its exit status,
and, through the steward's telemetry of its pid (and its children), its GPU memory and SM
activity; whether it became a client of the cell's MPS server (watched from its start until seen or
it ends, :mod:`raycolloc.job.script_mps`; never seen: ``mps_check_error`` says what was asked). With
``workload.epoch_regex``, each line of its stdout that matches marks an epoch's end (named groups
``epoch``, ``samples`` and ``loss`` fill those columns), so epoch-2 times exist for scripts too. A non-zero exit is
``status=error`` (``oom`` when its stderr says out of memory) with the tail of its stderr.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from raycolloc.job.script_exec import PYTHONPATH_KEEP, encode_device
from raycolloc.job.script_mps import MpsWatch
from raycolloc.procs import (
    KERNEL_CACHES,
    cache_env,
    format_cpus,
    move_threads_off,
    normal_priority,
    python_env,
    quiet_exit_in_finalizers,
)
from raycolloc.results.rows import EpochRow
from raycolloc.spec import Binding, JobInfo, JobProgress, JobSpec, JobState, JobStatus

__all__ = ["EpochMarks", "ScriptTrainer", "script_command"]

log = logging.getLogger(__name__)
TAIL_LINES = 25
_OOM = re.compile(r"out of memory|CUDA_ERROR_OUT_OF_MEMORY|CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE)


def script_command(command: tuple[str, ...]) -> list[str]:
    """The command to exec: a leading ``python`` is the interpreter raycolloc itself runs under."""
    return [sys.executable, *command[1:]] if command and command[0] == "python" else list(command)


class EpochMarks:
    """Epoch ends read off a script's stdout: line ``k`` matching ``pattern`` ends epoch ``k`` (or
    the epoch its ``epoch`` group names); epoch 1 starts when the process starts (warm-up)."""

    def __init__(self, job: JobSpec, pattern: str | None, started: float) -> None:
        self.job, self.pattern = job, re.compile(pattern) if pattern else None
        self.last = started
        self.rows: list[EpochRow] = []

    def feed(self, line: str, ts: float) -> EpochRow | None:
        match = self.pattern.search(line) if self.pattern else None
        if match is None:
            return None
        groups = match.groupdict()
        epoch = int(groups["epoch"]) if groups.get("epoch") else len(self.rows) + 1
        samples = int(groups["samples"]) if groups.get("samples") else None
        loss = float(groups["loss"]) if groups.get("loss") else None
        wall = max(ts - self.last, 1e-9)
        row = EpochRow(
            cell_id=self.job.cell_id,
            job_index=self.job.index,
            epoch=epoch,
            warmup=not self.rows,
            start_ts=self.last,
            end_ts=ts,
            wall_s=wall,
            samples=samples,
            samples_per_s=samples / wall if samples else None,
            windows=None,  # timed from outside, by its lines: no windows inside the epoch
            rate_low=None,
            rate_high=None,
            rate_cv=None,
            rate_median=None,
            window_steps=[],
            window_s=[],
            steps=None,
            loss=loss,
            thread_cpu_s=None,
            thread_sys_s=None,
            minor_faults=None,
            involuntary_switches=None,
            voluntary_switches=None,
            peak_mem_allocated_mib=None,
            peak_mem_reserved_mib=None,
        )
        self.rows.append(row)
        self.last = ts
        return row


def _read(stream: IO[bytes], handler: Any, echo: IO[str]) -> None:
    """Hand each line of a script's output to ``handler`` as it arrives, and echo it to the actor's
    log (as the script would have printed it)."""
    for raw in stream:
        line = raw.decode(errors="replace").rstrip("\r\n")
        handler(line)
        print(line, file=echo, flush=True)


class ScriptTrainer:
    """One script job (see the module docstring); the cell calls it as it calls a ``Trainer``
    (:meth:`start`, then setup, epochs, finish). A script job's actor is its cell's own: the lane
    does not lend it to another cell."""

    def __init__(self) -> None:
        normal_priority()
        quiet_exit_in_finalizers()
        self.job: JobSpec | None = None

    def start(self, job: JobSpec, binding: Binding, board: Any = None, forkserver: str | None = None) -> None:
        """Take the job (its process starts in :meth:`setup`).

        Args:
            job: the job; ``job.workload`` is a ``ScriptWorkload``.
            binding: how the job is bound to its GPU, and the device it calls (from the steward).
            board: the sweep's part of the progress board (``raycolloc.driver.progress.Board``), or None.
            forkserver: ignored: a script is exec'd as written, never forked from raycolloc's warm parent.
        """
        self.job, self.binding, self.board = job, binding, board
        self.workload: Any = job.workload
        if binding.cpus or binding.reserved_cpus:
            move_threads_off(binding.cpus or (), onto=binding.reserved_cpus)
        self._proc: subprocess.Popen[bytes] | None = None
        self._readers: list[threading.Thread] = []
        self._stderr: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._marks: EpochMarks | None = None
        self._mps: MpsWatch | None = None
        self._log: IO[str] | None = None
        self._state = JobState(
            info=JobInfo(
                hostname=socket.gethostname(),
                mig_uuid=binding.mig_uuid,
                mig_profile=binding.mig_profile,
                cpus=format_cpus(binding.cpus),
            )
        )

    def __repr__(self) -> str:
        return f"ScriptTrainer({self.job.cell_id}/{self.job.name})" if self.job else "ScriptTrainer(idle)"

    @property
    def _running(self) -> JobSpec:
        """The job ``start`` was given (everything below runs after it)."""
        if self.job is None:
            raise RuntimeError("ScriptTrainer: no job started")
        return self.job

    def _env(self) -> dict[str, str]:
        """The script's environment: the node's, the workload's, then the binding's (which wins:
        the GPU or MIG device and the MPS pipe are the mode's), and where the launcher is; the
        directory of raycolloc's interpreter first on ``PATH``. Inductor's and triton's caches are the
        node's compile cache unless the workload names either (torch keeps triton's under inductor's): a
        script that imports timm or compiles left $TMPDIR/torchinductor_<user> behind (README's script
        job, 2026-12-05)."""
        node = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if not any(var in self.workload.env for var, _ in KERNEL_CACHES):
            cache_env(node, self._running.trainer.compile_cache)
        env = {
            **node,
            **self.workload.env,
            **self.binding.env,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "RAYCOLLOC_JOB_INDEX": str(self._running.index),
            "RAYCOLLOC_CELL_ID": self._running.cell_id,
        }
        # ``python`` inside the script's own commands (a shell line, a subprocess) is raycolloc's too.
        env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p)
        env[PYTHONPATH_KEEP] = env.get("PYTHONPATH", "")
        return python_env(env)  # the launcher imports raycolloc; it gives the script its own back

    # --- lifecycle (each returns the job's state; never raises for the script's failures) -------
    def setup(self) -> JobState:
        """Start the script; returns at once with its pid (the steward samples it from now on)."""
        info = self._state.info
        pin = self.binding.cpus or self.binding.shared_cpus  # not pinned: off the reserved cores
        cpus = ",".join(map(str, pin)) if pin else "-"
        launcher = [
            sys.executable,
            "-m",
            "raycolloc.job.script_exec",
            str(os.getpid()),
            cpus,
            encode_device(self.binding.device),
            "--",
            *script_command(self.workload.command),
        ]
        env = self._env()
        info.cuda_visible_devices = env.get("CUDA_VISIBLE_DEVICES")
        info.mps_pipe_dir = env.get("CUDA_MPS_PIPE_DIRECTORY")
        info.spawn = "exec"
        try:
            self._proc = subprocess.Popen(
                launcher,
                env=env,
                cwd=self.workload.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            return self._state.failed("error", f"cannot start {self.workload.command[0]}: {exc}")
        info.pid, info.started_ts = self._proc.pid, time.time()
        if self.binding.mps_pipe_dir and self.binding.mps_control:
            # From the start: the script may make its context and end before the cell asks for epochs.
            self._mps = MpsWatch(str(self.binding.mps_control), self.binding.mps_pipe_dir, self._proc.pid, info)
        self._marks = EpochMarks(self._running, self.workload.epoch_regex, info.started_ts)
        # A queued job's output goes to its log file (``JobSpec.log_path``), else to the actor's log.
        log_path = self._running.log_path
        self._log = open(log_path, "a", buffering=1) if log_path else None  # closed in finish
        for stream, handler, echo in (
            (self._proc.stdout, self._stdout_line, self._log or sys.stdout),
            (self._proc.stderr, self._stderr.append, self._log or sys.stderr),
        ):
            reader = threading.Thread(target=_read, args=(stream, handler, echo), daemon=True)
            reader.start()
            self._readers.append(reader)
        return self._state

    def run_epochs(self, first: int, last: int) -> JobState:
        """Wait for the script to exit (it runs its own epochs; ``first``/``last`` do not apply)."""
        proc = self._proc
        if proc is None or not self._state.ok:
            return self._state
        proc.wait()
        self._state.info.ended_ts = time.time()
        for reader in self._readers:
            reader.join(timeout=10)
        return self._ended(proc.returncode)

    def finish(self) -> JobState:
        """Final record; a script still running (the cell was cut short) is killed."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)
        if self._mps is not None:
            self._mps.stop()
        for reader in self._readers:  # the script's last lines in its log before the file is closed
            reader.join(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self._state

    # --- internals ---------------------------------------------------------------------------
    def _stdout_line(self, line: str) -> None:
        row = self._marks.feed(line, time.time()) if self._marks else None
        if row is None:
            return
        self._state.epochs.append(row)
        if self.board is not None:
            # Fire and forget: the driver draws it; the script's own epoch count is not known ahead.
            progress = JobProgress(
                epoch=row.epoch,
                step=1,
                steps=1,
                epochs=max(self._running.epochs, row.epoch),
                samples_per_s=row.samples_per_s or 0.0,
            )
            self.board.job(self._running.cell_id, self._running.index, progress)

    def _ended(self, code: int) -> JobState:
        info = self._state.info
        info.exit_code = code
        if self._mps is not None:
            self._mps.stop()  # its verdict (seen, or what was asked) written before the row is
        info.mps_client = bool(info.mps_client)
        if code == 0:
            return self._state
        tail = "\n".join(self._stderr)[-2000:]
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        status: JobStatus = "oom" if _OOM.search(tail) else "error"
        log.error("script job %s %s", self._running.name, how)
        return self._state.failed(status, f"script {how}; stderr ends: {tail}" if tail else f"script {how}")
