"""Two Ray nodes started as a user starts them (``ray start --head``, then ``ray start --address=...``;
one simulated GPU on each, :mod:`tests.ray_nodes`): a sweep and a ``queue.runner=ray`` replay put work on
both, and a node killed in the middle of a replay takes its GPU out of the queue while its job is
re-queued (not counted as a failure) and ends on the other node's GPU, every job once, nothing left
behind (issue 45). The two tests share the cluster; the second kills its second node, so it runs last."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest

from analysis.load import load_sweeps
from raycolloc.doctor import main as doctor

from .conftest import ROOT, run_cli, short_tmp
from .ray_nodes import RayNodes, start_nodes
from .session_dirs import doctor_findings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nodes() -> Iterator[RayNodes]:
    """A head and a second node, each with one simulated GPU and 4 CPUs; every process stopped after."""
    cluster = start_nodes(short_tmp("rn"), cpus=4, gpus=1)
    try:
        cluster.add_node(cpus=4, gpus=1)
        yield cluster
    finally:
        cluster.stop()


def _trace(path: Path, samples: int) -> Path:
    rows = "".join(f"j{i},0,timm,resnet18,cifar10,{samples}\n" for i in (1, 2))
    path.write_text(f"job_id,submit_s,kind,model,dataset,samples\n{rows}")
    return path


def _replay(nodes: RayNodes, trace: Path, out: Path, pipe_root: Path) -> list[str]:
    """``python -m raycolloc.queue replay`` on the cluster, as a user runs it (``exclusive``: one job per
    GPU, so two jobs at once land one on each node)."""
    words = ["cluster=local", f"cluster.address={nodes.address}", f"mode.pipe_root={pipe_root}"]
    words += ["queue.runner=ray", "queue.policy=exclusive", "queue.profiles=catalog", "queue.stand_in=tiny_cnn"]
    return [sys.executable, "-m", "raycolloc.queue", "replay", str(trace), *words, f"out_dir={out}"]


def _attempts(out: Path) -> pd.DataFrame:
    (path,) = out.glob("queue/*/attempts.parquet")
    return pd.read_parquet(path)


def _ended_once(out: Path) -> Counter[str]:
    (db,) = out.glob("queue/*/queue.sqlite")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return Counter(str(j) for (j,) in con.execute("SELECT job_id FROM events WHERE kind='ended'"))


def test_a_sweep_and_a_queue_replay_put_work_on_both_nodes(nodes: RayNodes, tmp_path: Path) -> None:
    head, second = (nodes.node_id(p) for p in nodes.procs)
    pipe_root = short_tmp("rcn")
    sweep = run_cli(
        [
            "-m",
            "cluster=local",
            f"cluster.address={nodes.address}",
            "repeats=1",
            # Two one-job cells, one per GPU: both leased at once, so one on each node. Their steps sleep
            # (tests/sleepy_workload.py): a 2-core machine's CPUs stay free for the two nodes.
            "workload=python",
            "workload.entry=tests.sleepy_workload:build",
            # The two jobs' first steps wait for each other (``meet``): the head's lane cannot run both
            # cells one after the other, however long the second node's lane takes to open (a loaded CI
            # box opened it after the head's two 6 s epochs had ended, and both cells ran on the head).
            f"workload.args={{meet_dir:'{short_tmp('meet')}',meet:2}}",
            "batch_size=16",
            # Epochs of 3 s (a time budget): after the meeting, each cell's two epochs.
            "epoch_samples=1000000",
            "epoch_time_s=3",
            "epochs=2",
            "degree=1",
            "mode=naive",
            "seed=0,1",
            f"mode.pipe_root={pipe_root}",
            f"out_dir={tmp_path / 'sweep'}",
        ],
        cwd=ROOT,
        timeout=600,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    cells = load_sweeps([tmp_path / "sweep"], all_results=True).table("cells")
    assert set(cells["status"]) == {"ok"} and set(cells["node_id"]) == {head, second}

    out = tmp_path / "queue"
    replay = subprocess.run(
        _replay(nodes, _trace(tmp_path / "t.csv", 256), out, pipe_root), cwd=ROOT, capture_output=True, text=True
    )
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    attempts = _attempts(out)
    assert set(attempts.outcome) == {"ended"} and {g[:8] for g in attempts.gpu} == {head[:8], second[:8]}
    assert _ended_once(out) == Counter({"j1": 1, "j2": 1})
    assert doctor_findings(pipe_root) == []


def _training_under(proc: subprocess.Popen[bytes]) -> bool:
    """Whether a trainer actor under a node's process is busy with a job (set-up or epochs)."""
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if title.startswith(("ray::Trainer.setup", "ray::Trainer.run_epochs")):
            return True
    return False


def _cluster_state(address: str) -> dict[str, Any]:
    """What the cluster holds after the replay, read by a driver of its own (this process may be joined to
    the session's instance): nodes alive, the queue's placement groups, GPUs free of all (Ray frees a
    removed group's resources a moment later: waited for up to 30 s)."""
    code = (
        "import json, time, ray\n"
        "from ray.util.placement_group import placement_group_table\n"
        f"ray.init(address={address!r}, log_to_driver=False)\n"
        "deadline = time.monotonic() + 30\n"
        "while ray.available_resources().get('GPU', 0) < ray.cluster_resources().get('GPU', 0) "
        "and time.monotonic() < deadline:\n"
        "    time.sleep(0.2)\n"
        "groups = [g['state'] for g in placement_group_table().values() if g['name'].startswith('raycolloc:queue')]\n"
        "print(json.dumps({'alive': sum(n['Alive'] for n in ray.nodes()), 'groups': groups,\n"
        "    'free': ray.available_resources().get('GPU', 0), 'gpus': ray.cluster_resources().get('GPU', 0)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_node_killed_mid_replay_requeues_its_job_onto_the_other_node(nodes: RayNodes, tmp_path: Path) -> None:
    head, second = (nodes.node_id(p) for p in nodes.procs)
    pipe_root = short_tmp("rcn")
    out = tmp_path / "queue"
    # Jobs long enough (seconds of tiny_cnn steps) to be training when the node goes.
    cmd = _replay(nodes, _trace(tmp_path / "t.csv", 12_000), out, pipe_root)
    log = (tmp_path / "replay.log").open("w")
    replay = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    doomed = nodes.procs[1]
    tree = [psutil.Process(doomed.pid)]
    try:
        deadline = time.monotonic() + 300
        while not _training_under(doomed):
            assert replay.poll() is None and time.monotonic() < deadline, (tmp_path / "replay.log").read_text()[-3000:]
            time.sleep(0.2)
        tree += psutil.Process(doomed.pid).children(recursive=True)
        nodes.kill(doomed)
        assert replay.wait(timeout=400) == 0, (tmp_path / "replay.log").read_text()[-3000:]
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
        log.close()
    attempts = _attempts(out)
    lost = attempts[attempts.outcome == "node lost"]
    assert len(lost) == 1 and lost.gpu.iloc[0][:8] == second[:8]  # the job training there when it went
    job = lost.job_id.iloc[0]
    ended = attempts[attempts.outcome == "ended"].set_index("job_id")
    assert set(ended.index) == {"j1", "j2"} and ended.loc[job, "gpu"][:8] == head[:8]  # ended on the head's GPU
    assert ended.loc[job, "attempt"] == lost.attempt.iloc[0] + 1
    assert set(attempts.outcome) == {"ended", "node lost"}  # no failure counted, no other attempt
    assert _ended_once(out) == Counter({"j1": 1, "j2": 1})
    assert "leaves the queue" in (tmp_path / "replay.log").read_text()
    # Nothing left: no process of the lost node, every lease of the queue gone, and of what the doctor
    # finds, only the GPU directory of the lost node's steward, which `doctor --fix` removes (on a cluster
    # it lies on the lost machine; the next steward started there removes it as well).
    assert not [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    killed = {p.pid for p in tree}
    found = doctor_findings(pipe_root)
    assert all(re.search(r"GPU-.* \(steward pid (\d+) ", f) for f in found), found
    assert {int(re.findall(r"steward pid (\d+) ", f)[0]) for f in found} <= killed
    with contextlib.redirect_stdout(io.StringIO()):
        assert doctor(["--pipe-root", str(pipe_root), "--fix"]) == 0
    assert doctor_findings(pipe_root) == []
    state = _cluster_state(nodes.address)
    assert state["alive"] == 1 and set(state["groups"]) == {"REMOVED"}
    assert state["free"] == state["gpus"] == 1


def test_a_node_the_gcs_counts_dead_or_whose_steward_died_is_lost(ray_local: None) -> None:
    """On the session's instance: a lane on a node id the GCS does not count alive is lost, one whose
    steward's actor was killed is lost (its raylet gone before the GCS says so), a live one is not; and
    between looks (``NODE_CHECK_S``) nothing is looked at unless forced."""
    import threading

    import ray

    from raycolloc.driver.lane import Lane
    from raycolloc.driver.side_by_side import MeasureWindows
    from raycolloc.queue.raylanes import QueueLane
    from raycolloc.queue.raynodes import NodeWatch

    def lane(gpu_id: str, steward: Any, node_id: str) -> QueueLane:  # only its node and steward are asked
        held = Lane(None, node_id, steward, None, None, threading.Event(), None, None, MeasureWindows())
        return QueueLane(gpu_id, held)

    @ray.remote(num_cpus=0)
    class Steward:  # what the watch asks of a node's steward: that it answers
        def held(self) -> dict[str, str]:
            return {}

    here = ray.get_runtime_context().get_node_id()
    live, killed = Steward.remote(), Steward.remote()
    ray.get([live.held.remote(), killed.held.remote()], timeout=60)
    ray.kill(killed, no_restart=True)
    gone = "f" * len(here)
    lanes = [lane(g, s, n) for g, s, n in [("a", live, here), ("b", live, gone)]]
    watch = NodeWatch()
    assert watch.lost(lanes, 0.0) == {gone}
    assert watch.lost([lanes[1]], 0.5) == set()  # not looked at again within NODE_CHECK_S
    assert watch.lost([lanes[1]], 0.5, force=True) == {gone}
    assert watch.lost([lane("c", killed, here)], 2.0) == {here}
    assert watch.lost(lanes[:1], 4.0) == set()
    ray.kill(live, no_restart=True)
