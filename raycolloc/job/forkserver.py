"""The node's warm parent of training processes: torch and timm imported once, a fork per job.

A training process used to start as a fresh ``python -m raycolloc.job.process``: importing torch and
timm cost it 6.3-6.5 s of every cell's set-up on 2 busy cores (local mode, tiny_cnn), more than
anything else a cell did before its epochs. The fork server imports them (and raycolloc's job
modules) once per node and forks a training process per job in milliseconds.

What a fork must not inherit, and why it cannot:

* CUDA: the server never initialises it (checked before every fork), so each child creates its own
  context, after it applied its binding's environment (``CUDA_VISIBLE_DEVICES`` = GPU or MIG UUID,
  the MPS pipe), exactly as a fresh process would.
* Threads: the server is single-threaded (one ``select`` loop, no helper threads) and starts with
  ``OMP_NUM_THREADS=1`` (with more, importing torch starts an OpenMP thread, which a fork would lose
  while the runtime still counts on it); the child pins itself to the job's cores before any thread of
  it starts, so all of them inherit the cores.
* The parent's environment and files: the child replaces its whole environment with the one its
  trainer actor sent (the actor's own plus the binding), closes the server's sockets, and talks only
  over the connection its actor passed in (``SCM_RIGHTS``).

A child dies with its trainer actor (it watches the actor's pid), as an exec'd child did through
``PR_SET_PDEATHSIG``. The server reaps its children and tells each requester its child's exit code.
The server itself ends with the steward that started it (through a stand-in process, see
:func:`_stand_in`, and ``PR_SET_PDEATHSIG`` with SIGTERM), and then removes its socket and its log
(which the steward names): a run leaves neither in ``mode.pipe_root``. Only a server that is SIGKILLed itself leaves
them, for the next steward to remove
(:mod:`raycolloc.node.leftovers`); one that fails keeps its log, for the steward's warning to name.

Protocol on the server's Unix socket (``multiprocessing`` connections): a requester sends
``(env, actor_pid)`` then passes the fd of its end of the job's socket pair; the server answers
``("pid", pid)``, later ``("exit", code)`` on the same connection. The child then speaks
:mod:`raycolloc.job.process`'s protocol with the actor, exactly as an exec'd one does.
"""

from __future__ import annotations

import ctypes
import gc
import os
import select
import signal
import socket
import sys
import time
from multiprocessing import reduction
from multiprocessing.connection import Connection

__all__ = ["PRELOAD", "TIMM", "main"]

PRELOAD = (
    "torch",
    # torch.optim's constructors import torch._dynamo at their first call (``torch._disable_dynamo``): each
    # training process paid 1.5-2 CPU-s for it at its set-up (a tiny_cnn job's "model" phase: 1.2 s of
    # 1.3 s on a 2-core VM); here once per node instead.
    "torch._dynamo",
    "raycolloc.job.process",
    "raycolloc.job.step",
    "raycolloc.job.data.sources",
    "raycolloc.job.workloads.presets",
    "raycolloc.job.workloads.models",
)
# With ``--timm`` (a real GPU's steward: its jobs are timm models) timm comes first. It imports
# torchvision, whose ops import torch._dynamo: ~10 CPU-seconds on a 2-core CI VM, where simulated GPUs
# mostly train tiny models that never need it (a job that does imports it at its set-up).
TIMM = "timm"
_PR_SET_PDEATHSIG = 1


class _Stopped(BaseException):
    """SIGTERM (the steward is gone): leave the serving loop and remove the server's files."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def _child(
    listener: socket.socket, conns: list[Connection], env: dict[str, str], actor_pid: int, job_fd: int, group: int
) -> None:
    """In the forked child: become the job's training process (never returns)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # SIGTERM ends a job as it ends an exec'd one
        try:
            os.setpgid(0, group)  # the steward's process group: Ray kills the job with it, as before
        except OSError:  # the group is gone (the steward with it): the job's actor is next
            pass
        listener.close()
        for conn in conns:
            conn.close()
        os.environ.clear()
        os.environ.update(env)  # before CUDA initialises: its device, MPS pipe and allocator
        from raycolloc.job import process

        process.run(Connection(job_fd), actor_pid, forked=True)
    except BaseException:  # noqa: BLE001 - a child never returns into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)


def _serve(path: str, group: int) -> None:
    import torch

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.chmod(path, 0o600)  # owner only: the node's trainer actors run as the steward's user
    requests: dict[int, Connection] = {}  # child pid -> its requester's connection
    waiting: list[Connection] = []
    print(f"forkserver ready pid={os.getpid()} socket={path}", flush=True)
    while True:
        watched: list[socket.socket | Connection] = [listener, *waiting]
        readable, _, _ = select.select(watched, [], [], 0.2)
        for item in readable:
            if item is listener:
                sock, _ = listener.accept()
                waiting.append(Connection(sock.detach()))
                continue
            conn = next(c for c in waiting if c is item)
            waiting.remove(conn)
            try:
                env, actor_pid = conn.recv()
                job_fd = reduction.recv_handle(conn)
            except (EOFError, OSError):
                conn.close()
                continue
            if torch.cuda.is_initialized():  # never: a forked CUDA context is unusable
                conn.send(("error", "the fork server has initialised CUDA; it cannot fork training processes"))
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(listener, [conn, *waiting, *requests.values()], env, actor_pid, job_fd, group)
            os.close(job_fd)
            requests[pid] = conn
            conn.send(("pid", pid))
        _reap(requests)


def _reap(requests: dict[int, Connection]) -> None:
    """Collect exited children and tell each requester its child's exit code."""
    while requests:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = requests.pop(pid, None)
        if conn is None:
            continue
        try:
            conn.send(("exit", os.waitstatus_to_exitcode(status)))
        except OSError:
            pass
        conn.close()


def _death_signal(sig: int) -> None:
    """Receive ``sig`` when the parent ends."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def _stand_in(server: int) -> None:
    """The steward's child, while its child ``server`` serves (never returns).

    Ray SIGKILLs a worker's children, and its whole process group, when the worker exits, which would
    leave the server no moment to remove its files. So the steward's child is this small stand-in, in
    the steward's group: it dies with the steward (or is killed by Ray), and the server, its child in
    a group of its own, gets SIGTERM then (its parent-death signal). It ends with the server's exit
    status, which the steward watches. Forked jobs join the steward's group again.
    """
    _, status = os.waitpid(server, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def main(argv: list[str] | None = None) -> None:
    """``python -m raycolloc.job.forkserver SOCKET [LOG] [--timm]``: preload, then fork training processes on
    request until SIGTERM, which removes SOCKET and LOG."""
    args = list(argv or sys.argv[1:])
    preload = (TIMM, *PRELOAD) if "--timm" in args else PRELOAD
    path, *log = [a for a in args if a != "--timm"]
    _death_signal(signal.SIGKILL)  # the stand-in goes with the steward that started it
    stand_in = os.getpid()
    if pid := os.fork():  # before any import or thread: the fork is cheap and safe
        _stand_in(pid)
    server, group = os.getpid(), os.getpgrp()
    signal.signal(signal.SIGTERM, _stop)  # before the parent-death signal can arrive
    # A sweep's local Ray starts with SIGTERM blocked (raycolloc.driver.signals) and its processes inherit
    # the mask: unblocked, or the parent-death signal would wait forever and the server outlive its steward.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _death_signal(signal.SIGTERM)
    # Out of the steward's process group, which Ray SIGKILLs whole when the steward ends: the server
    # ends by its parent-death signal instead, and removes its files.
    os.setpgid(0, 0)
    try:
        if os.getppid() != stand_in:  # it died before the signal was armed
            raise _Stopped
        _preload_and_serve(path, group, preload)
    except _Stopped:
        if os.getpid() == server:  # a child that had not yet reset the handler removes nothing
            for leftover in (path, *log):
                try:
                    os.unlink(leftover)
                except FileNotFoundError:
                    pass
        os._exit(0)


def _preload_and_serve(path: str, group: int, preload: tuple[str, ...]) -> None:
    t0 = time.perf_counter()
    for module in preload:
        __import__(module)
    # Preloaded objects go to the permanent generation: a child's collections never walk them, so they
    # do not touch (and copy) the pages it shares with this process.
    gc.freeze()
    print(f"forkserver preloaded {', '.join(preload)} in {time.perf_counter() - t0:.1f}s", flush=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    _serve(path, group)


if __name__ == "__main__":
    main()
