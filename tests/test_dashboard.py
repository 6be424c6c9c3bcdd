"""The Ray dashboard shows a running cell: its named actors in the state API, its gauges in Prometheus.

The real command line runs one degree-2 cell with ``cluster.dashboard=true`` (its own local Ray
instance, dashboard and metrics export on free ports of 127.0.0.1) while the test polls
``GET /api/v0/actors`` on the dashboard and ``GET /metrics`` on the metrics agent. Gauges are only
exported while someone keeps setting them (Ray ages a silent series out after two report
intervals), so both are watched during the cell, not after it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raycolloc.node.steward_handles import NAMESPACE, steward_name

from .conftest import CPU_OVERRIDES, ROOT, load, short_tmp

HTTP_TIMEOUT_S = 5.0
RUN_DEADLINE_S = 240.0  # the whole cell, Ray and dashboard start included (2 busy cores: ~60-90 s)
SAMPLES = "ray_raycolloc_job_samples_per_s"
SM_ACTIVE = "ray_raycolloc_gpu_sm_active"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str | None:
    """The body of ``url``, or None while the server is not up yet (every request has a timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:  # noqa: S310 - 127.0.0.1 only
            return resp.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def _actors(dashboard: str) -> list[dict[str, Any]] | None:
    """Actors of our namespace from Ray's state API (``{"data": {"result": {"result": [...]}}}``)."""
    query = urllib.parse.urlencode(
        {"filter_keys": "ray_namespace", "filter_predicates": "=", "filter_values": NAMESPACE, "limit": 1000}
    )
    body = _get(f"{dashboard}/api/v0/actors?{query}")
    if body is None:
        return None
    try:
        reply = json.loads(body)
    except json.JSONDecodeError:
        return None
    return reply["data"]["result"]["result"] if reply.get("result") else None


def _gauges(metrics: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Our two gauges' samples (labels, value) from the Prometheus text of the metrics agent."""
    body = _get(f"{metrics}/metrics")
    found: dict[str, list[tuple[dict[str, str], float]]] = {SAMPLES: [], SM_ACTIVE: []}
    if body is None:
        return found
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name].append((dict(sample.labels), float(sample.value)))
    return found


@dataclass
class _Seen:
    """What the polls found so far (kept for the failure message)."""

    actors: dict[str, dict[str, Any]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)  # job name -> highest samples/s seen
    sm_active: dict[str, float] = field(default_factory=dict)  # gpu label -> highest SM activity seen

    def trainers(self) -> list[str]:
        """Trainer actors seen alive (a lane's, lent to the cell's jobs)."""
        return [n for n, a in self.actors.items() if a["class_name"] == "Trainer" and a["state"] == "ALIVE"]

    def complete(self, jobs: set[str]) -> bool:
        alive = {n for n, a in self.actors.items() if a["state"] == "ALIVE"}
        steward = any(n.startswith("raycolloc:steward:") for n in alive)
        return (
            len(self.trainers()) >= len(jobs)
            and steward
            and set(self.rates) >= jobs
            and all(v > 0 for v in self.rates.values())
            and any(v > 0 for v in self.sm_active.values())
        )


def _ray_processes(ray_tmp: str) -> list[int]:
    """Our processes that belong to the test's Ray instance (its RAY_TMPDIR is in their environment)."""
    marker = f"RAY_TMPDIR={ray_tmp}\0".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:  # not ours, or gone
            continue
    return pids


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """A private Ray temp dir (short: it holds Unix sockets); Ray processes still in it are killed."""
    path = str(short_tmp("rcd"))
    yield path
    deadline = time.monotonic() + 20
    while _ray_processes(path) and time.monotonic() < deadline:
        time.sleep(0.5)  # workers exit on their own once their raylet is gone
    for pid in _ray_processes(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(path, ignore_errors=True)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C the sweep (it releases the GPU and stops Ray), then kill its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session (start_new_session): only what it started
        proc.wait(timeout=30)


@pytest.mark.slow  # a Ray instance with its dashboard, one cell of two 8-second epochs
def test_dashboard_shows_the_cells_actors_and_gauges(tmp_path: Path, ray_tmp: str) -> None:
    dash_port, metrics_port = _free_port(), _free_port()
    out = tmp_path / "results"
    # The test polls while the cell runs: 2 jobs whose 10 ms steps compute 3 ms and sleep the rest
    # (tests/sleepy_workload.py; the simulated SM activity follows the jobs' CPU time), for two epochs
    # of 8 s (a time budget), a window that does not shrink on a busy machine, as epochs of a number
    # of samples do; gauges appear 1-3 s after the jobs start.
    overrides = [
        "degree=2",
        "workload=python",
        "workload.entry=tests.sleepy_workload:build",
        "workload.args={step_ms:10,busy_ms:3}",
        "batch_size=16",
        "epoch_samples=1000000",
        "epoch_time_s=8",
        "cluster.dashboard=true",
        "cluster.dashboard_host=127.0.0.1",
        f"cluster.dashboard_port={dash_port}",
        f"cluster.metrics_export_port={metrics_port}",
    ]
    job = load(overrides, out_dir=out)
    trainers = {j.name for j in job.jobs}
    dashboard, metrics = f"http://127.0.0.1:{dash_port}", f"http://127.0.0.1:{metrics_port}"

    env = dict(
        os.environ,
        RAY_TMPDIR=ray_tmp,
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        # Workers export their metrics every second instead of every 10 s: the gauges show
        # up early in the cell (the default is fine for people, slow for a test).
        RAY_metrics_report_interval_ms="1000",
    )
    env.pop("RAY_ADDRESS", None)  # cluster=local: a fresh instance, never one named by the caller's shell
    log_path = tmp_path / "sweep.log"
    seen = _Seen()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raycolloc.sweep", *CPU_OVERRIDES, f"out_dir={out}", *overrides],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + RUN_DEADLINE_S
            while proc.poll() is None and time.monotonic() < deadline and not seen.complete(trainers):
                for actor in _actors(dashboard) or []:
                    seen.actors[actor["name"]] = actor
                gauges = _gauges(metrics)
                for labels, value in gauges[SAMPLES]:
                    if labels.get("cell") == job.cell_id:
                        seen.rates[labels["job_name"]] = max(value, seen.rates.get(labels["job_name"], 0.0))
                for labels, value in gauges[SM_ACTIVE]:
                    if labels.get("cell") == job.cell_id:
                        seen.sm_active[labels["gpu"]] = max(value, seen.sm_active.get(labels["gpu"], 0.0))
                time.sleep(1.0)
            watched = seen.complete(trainers)
            if watched:
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass  # stopped below; its output is in the failure message
        finally:
            _stop(proc)
    output = log_path.read_text()
    assert watched, f"not all seen while the cell ran: {seen}\n--- sweep output ---\n{output[-4000:]}"
    assert proc.returncode == 0 and "status=ok" in output, f"rc={proc.returncode}\n{output[-4000:]}"

    # The actors: both trainers (the lane's, named after it) and the node's steward, alive, in our
    # namespace, on the same node.
    assert len(seen.trainers()) == 2 and all(n.startswith("raycolloc:lane-") for n in seen.trainers())
    nodes = {seen.actors[t]["node_id"] for t in seen.trainers()}
    assert len(nodes) == 1
    steward = steward_name(nodes.pop(), job.config.cluster)
    assert steward in seen.actors, sorted(seen.actors)
    assert seen.actors[steward]["state"] == "ALIVE" and seen.actors[steward]["class_name"] == "Steward"
    # The gauges: every job's throughput, and the SM activity of the GPU the cell's row names.
    assert set(seen.rates) == {j.name for j in job.jobs}
    cells = pd.read_parquet(next(out.rglob("cells.parquet")))
    assert list(seen.sm_active) == [cells.loc[0, "gpu_uuid"]]
    assert 0 < seen.sm_active[cells.loc[0, "gpu_uuid"]] <= 100
