"""A Ray cluster of several nodes on this machine, started as a user starts one: ``ray start --head`` and
``ray start --address=...`` (each a ``--block`` process of its own session), simulated GPUs on each
(``--num-gpus``: the simulated backend of ``cluster=local`` gives every node as many GPUs as Ray does).

Every port is picked free, as a CI machine may run other Ray instances beside it (Ray's fixed defaults,
the client server's 10001 and the dashboard agent's 52365, would collide). :meth:`RayNodes.kill` loses a
node as a machine is lost (its raylet's process group killed at once: its workers follow);
:meth:`RayNodes.stop` ends every process of every node, whatever the test did."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["RayNodes", "start_nodes"]

RAY = str(Path(sys.executable).with_name("ray"))
START_S = 90.0  # a node up: ~10 s alone, ~40 s on a loaded 2-core machine
ATTEMPTS = 3
STOP_S = 5.0  # SIGTERM to SIGKILL (`ray start --block` alone drains its node for up to 30 s)
RAY_ENV = {
    # The GCS declares a node whose raylet stopped answering dead after its health checks miss: by Ray's
    # defaults (3 s period, 10 s timeout, 5 misses) up to about a minute; here 5 to 15 s (a live raylet
    # of a loaded machine answers within 3 s). The queue finds a lost node sooner, by its steward.
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",
    "RAY_health_check_failure_threshold": "5",
    # A raylet gets 30 s to register with the GCS, and its agents as long; a loaded 2-core machine took
    # longer. (A raylet whose dashboard agent wrote its port after ~15 s aborted all the same, "Timed out
    # waiting for file dashboard_agent_listen_port": `_start` starts such a node again.)
    "RAY_raylet_start_wait_time_s": "80",
    "RAY_agent_register_timeout_ms": "80000",
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports() -> list[str]:
    keys = ["node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc"]
    keys += ["runtime-env-agent", "metrics-export"]
    return [f"--{key}-port={_port()}" for key in keys]


@dataclass
class RayNodes:
    """The processes of a cluster's nodes (``ray start --block``, each with its log file)."""

    root: Path
    address: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _start(self, words: list[str], cpus: int, gpus: int) -> subprocess.Popen[bytes]:
        """A node started; one that does not start in ``START_S`` is stopped and started again, up to
        ``ATTEMPTS`` times (a loaded machine's raylet has aborted when its dashboard agent started late)."""
        for attempt in range(1, ATTEMPTS + 1):
            proc, log = self._try(words, cpus, gpus, attempt)
            deadline = time.monotonic() + START_S
            while b"Ray runtime started" not in log.read_bytes() and proc.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            else:
                if proc.poll() is None:
                    return proc
            _end([proc], signal.SIGKILL, 0.0)
            self.procs.remove(proc)
        raise RuntimeError(f"ray start did not start a node {ATTEMPTS} times: {log.read_text()[-2000:]}")

    def _try(self, words: list[str], cpus: int, gpus: int, attempt: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.root / f"node{len(self.procs)}-{attempt}.log"
        env = {**os.environ, **{k: os.environ.get(k, v) for k, v in RAY_ENV.items()}}
        cmd = [RAY, "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", f"--num-gpus={gpus}"]
        cmd += ["--disable-usage-stats", f"--temp-dir={self.root / 'ray'}", *_ports(), *words]
        with log.open("wb") as out:  # its own session: a signal to the test's group does not reach it
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.procs.append(proc)
        return proc, log

    def add_node(self, cpus: int, gpus: int) -> subprocess.Popen[bytes]:
        """A node joined to the head (``ray start --address=...``)."""
        return self._start([f"--address={self.address}"], cpus, gpus)

    def node_id(self, proc: subprocess.Popen[bytes]) -> str:
        """The Ray node id of a node's process (its raylet's ``--node-id``)."""
        for child in psutil.Process(proc.pid).children(recursive=True):
            found = re.search(r"--node-id=([0-9a-f]+)", " ".join(child.cmdline()))
            if found:
                return found.group(1)
        raise RuntimeError(f"node {proc.pid} has no raylet")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """Lose the node at once, as a machine is lost: SIGKILL to it and every process under it."""
        _end([proc], signal.SIGKILL, 0.0)

    def stop(self) -> None:
        """End every node: SIGTERM to each of its processes, SIGKILL what is left after ``STOP_S``."""
        _end(self.procs, signal.SIGTERM, STOP_S)


def _end(procs: list[subprocess.Popen[bytes]], sig: int, grace_s: float) -> None:
    """Send ``sig`` to each ``ray start`` process's group and to every process under it (Ray's workers
    run in groups of their own); SIGKILL to whatever still runs after ``grace_s``; reap them all."""
    tree: list[psutil.Process] = []
    for proc in procs:
        try:
            tree += [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
    for p in tree:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=10)
    for proc in procs:
        if proc.poll() is None:
            proc.wait(timeout=10)


def start_nodes(root: Path, cpus: int, gpus: int) -> RayNodes:
    """A head node (``ray start --head``), its temp dir under ``root``; the caller adds nodes and stops all."""
    nodes = RayNodes(root)
    port = _port()
    nodes.address = f"127.0.0.1:{port}"
    head = ["--head", f"--port={port}", "--include-dashboard=false", f"--dashboard-port={_port()}"]
    try:
        nodes._start([*head, f"--ray-client-server-port={_port()}"], cpus, gpus)
    except BaseException:
        nodes.stop()
        raise
    return nodes
