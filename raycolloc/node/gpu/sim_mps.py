"""A simulated ``nvidia-cuda-mps-control`` for local mode (no GPU).

It speaks the same command-line protocol as NVIDIA's tool, so the steward's MPS code runs
unchanged: ``-d`` starts a control daemon in the background on ``$CUDA_MPS_PIPE_DIRECTORY``;
without ``-d`` it reads commands from stdin (``get_server_list``, ``get_client_list PID``,
``quit``, ``set_default_active_thread_percentage N`` ...) and prints the daemon's replies.
A simulated CUDA client joins with the extra command ``client_attach PID``; the daemon then
forks a server process (``nvidia-cuda-mps-server`` in its command line), as the real one does.

Run as ``python -m raycolloc.node.gpu.sim_mps --as nvidia-cuda-mps-control [-d]``;
:func:`install_control` writes an executable wrapper with that name.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

from raycolloc.procs import alive

__all__ = ["install_control", "sim_mps_connect"]

SOCKET = "control"


def install_control(bin_dir: str | Path) -> str:
    """Write an executable ``nvidia-cuda-mps-control`` wrapper of this install (its Python and its
    ``raycolloc``) under ``bin_dir``; returns its path.

    The wrapper lies in a directory named by a hash of its text: an install never rewrites another's
    (issue 46, item 4: one checkout's steward ran the ``sim_mps`` of whichever install wrote last).
    """
    root = Path(__file__).resolve().parents[3]
    text = (
        f"#!/bin/sh\nPYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "
        f'-m raycolloc.node.gpu.sim_mps --as nvidia-cuda-mps-control "$@"\n'
    )
    path = Path(bin_dir) / hashlib.sha256(text.encode()).hexdigest()[:12] / "nvidia-cuda-mps-control"
    if path.is_file() and path.read_text() == text and os.access(path, os.X_OK):
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return str(path)


def _pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))


def _ask(pipe: Path, line: str, timeout: float = 5.0) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(pipe / SOCKET))
        s.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def sim_mps_connect(pid: int) -> bool:
    """What the CUDA driver does at initialisation: join the MPS daemon if one answers.

    Returns True if this process became an MPS client, False if it runs without MPS.
    """
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    if not pipe or not (Path(pipe) / SOCKET).exists():
        return False
    try:
        return _ask(Path(pipe), f"client_attach {pid}").strip() == "ok"
    except OSError:
        return False


def _server_main(daemon: int) -> None:
    """The simulated MPS server: lives until its control daemon (``daemon``, its parent) is gone. The
    daemon's pid comes from the daemon: read here, the parent of a server whose daemon died during its
    start-up (its Python's imports) was already init, and the server lived on (CI 2026-12-03)."""
    while os.getppid() == daemon:
        time.sleep(0.2)
    os._exit(0)


class _Daemon:
    def __init__(self, pipe: Path, log_dir: Path) -> None:
        self.pipe, self.log_dir = pipe, log_dir
        self.server: int | None = None
        self.clients: set[int] = set()
        self.settings: dict[str, str] = {}

    def log(self, msg: str) -> None:
        with open(self.log_dir / "control.log", "a") as fh:
            fh.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}\n")

    def start_server(self) -> int:
        daemon = os.getpid()
        pid = os.fork()
        if pid == 0:
            os.execv(
                sys.executable,
                [
                    sys.executable,
                    "-c",
                    f"import raycolloc.node.gpu.sim_mps as m; m._server_main({daemon})",
                    "nvidia-cuda-mps-server",
                ],
            )
        self.log(f"Server {pid} started")
        return pid

    def handle(self, line: str) -> tuple[str, bool]:
        cmd, *args = line.split() or [""]
        self.clients = {c for c in self.clients if alive(c)}
        if cmd == "get_server_list":
            return (f"{self.server}\n" if self.server else ""), False
        if cmd == "get_client_list":
            if not args or not self.server or int(args[0]) != self.server:
                return "", False
            return "".join(f"{c}\n" for c in sorted(self.clients)), False
        if cmd == "client_attach" and args:
            if self.server is None:
                self.server = self.start_server()
            self.clients.add(int(args[0]))
            self.log(f"Accepting client {args[0]}")
            return "ok\n", False
        if cmd == "quit":
            self.log("Quit")
            return "", True
        if cmd.startswith("set_") or cmd in ("start_server", "shutdown_server"):
            self.settings[cmd] = " ".join(args)
            return "", False
        return f"Unknown command: {cmd}\n", False

    def serve(self) -> None:
        sock_path = self.pipe / SOCKET
        sock_path.unlink(missing_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(sock_path))
        srv.listen(16)
        self.log(f"Control daemon started pid={os.getpid()}")
        try:
            while True:
                conn, _ = srv.accept()
                with conn:
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    reply, stop = self.handle(data.decode().strip())
                    conn.sendall(reply.encode())
                if stop:
                    break
        finally:
            srv.close()
            sock_path.unlink(missing_ok=True)
            if self.server:
                _kill(self.server)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        pass


def _daemonize(pipe: Path, log_dir: Path) -> None:
    if os.fork() > 0:
        # Parent: wait until the daemon answers, as the real tool returns once it is up.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (pipe / SOCKET).exists():
            time.sleep(0.02)
        sys.exit(0 if (pipe / SOCKET).exists() else 1)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    # A daemon takes signals afresh: its starter (a Ray worker) may block SIGINT and SIGTERM, which
    # would keep its server from ending on SIGTERM.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _Daemon(pipe, log_dir).serve()
    os._exit(0)


def main(argv: list[str]) -> int:
    args = [a for a in argv if a not in ("--as", "nvidia-cuda-mps-control")]
    pipe = _pipe_dir()
    if "-d" in args:
        log_dir = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
        pipe.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        if (pipe / SOCKET).exists():
            try:
                _ask(pipe, "get_server_list")
                print("An instance of this daemon is already running", file=sys.stderr)
                return 1
            except OSError:
                pass
        _daemonize(pipe, log_dir)
        return 0
    if not (pipe / SOCKET).exists():
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    for line in sys.stdin:
        if line.strip():
            try:
                sys.stdout.write(_ask(pipe, line.strip()))
            except OSError as exc:
                print(f"Cannot reach MPS control daemon: {exc}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
