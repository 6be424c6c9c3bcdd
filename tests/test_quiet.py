"""Quiet cores and cells side by side (issue 30): the node's own processes on a few reserved cores
that no job gets, and how many cells of a node measured at once (none with
``cluster.isolate_measurement=true``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from raycolloc.config import ClusterConfig, ConfigError
from raycolloc.driver.side_by_side import MeasureWindows
from raycolloc.node.cpus import CpuPool
from raycolloc.node.reserve import confine_process, plan_reservation

from .conftest import ROOT, load, run_cli, run_one, short_tmp


# --- the reservation: a pure function of the node's cores --------------------------------------------
@pytest.mark.parametrize(
    ("setting", "cpus", "near", "siblings", "cores"),
    [
        ("auto", range(16), None, None, (0,)),  # 1 core in 16, core 0 first
        ("auto", range(64), None, None, (0, 1, 2, 3)),
        ("auto", range(32), range(16, 32), None, (16, 17)),  # on the GPU's NUMA node
        ("auto", range(16), None, {0: {0, 8}}, (0, 8)),  # with its SMT sibling
        ("auto", range(2), None, None, ()),  # too small: jobs need the cores
        ("auto", range(3), None, None, ()),
        ("none", range(64), None, None, ()),
        ("2", range(8), None, None, (0, 1)),
        ("0-1", range(8), None, None, (0, 1)),
        ("6,7", range(8), None, None, (6, 7)),
        ("0-0", range(2), None, None, (0,)),  # asked for: kept, one core left for jobs
        ("0-1", range(2), None, None, ()),  # would leave no core for jobs
        ("8", range(8), None, None, ()),
        ("3,9", range(8), None, None, (3,)),  # core 9 is not this node's
    ],
)
def test_the_reserved_cores_follow_the_setting_and_the_node(setting, cpus, near, siblings, cores) -> None:  # noqa: ANN001
    got = plan_reservation(setting, list(cpus), None if near is None else set(near), siblings)
    assert got.cores == cores
    assert bool(got.note) == (not cores)  # nothing reserved: the note says why


@pytest.mark.parametrize("value", ["lots", "0", "-1", "1-0", "0,,1", "auto,none"])
def test_a_bad_reserved_cpus_names_the_key_and_the_choices(value: str) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.reserved_cpus=.* is not allowed"):
        ClusterConfig(reserved_cpus=value)


@pytest.mark.parametrize("value", ["auto", "none", "1", "4", "0-1", "0,2", "0-0"])
def test_good_reserved_cpus_are_accepted(value: str) -> None:
    ClusterConfig(reserved_cpus=value)


def test_a_bad_reserved_cpus_exits_2_before_ray() -> None:
    proc = run_cli(["cluster.reserved_cpus=lots", "cluster=local"], cwd=ROOT, own_ray=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cluster.reserved_cpus='lots' is not allowed" in proc.stderr + proc.stdout


def test_the_pool_never_hands_out_a_reserved_core() -> None:
    pool = CpuPool(set(range(8)))
    pool.reserve((0, 1))
    assert pool.shared() == (2, 3, 4, 5, 6, 7)
    got = [pool.allocate(f"c{i}", [1.0], near=[0, 1, 2]) for i in range(6)]
    assert all(g is not None for g in got)
    assert sorted(c for g in got if g for cores in g for c in cores) == [2, 3, 4, 5, 6, 7]
    assert pool.allocate("c6", [1.0]) is None  # full: not pinned, never onto the reserved cores


# --- confining a process: every thread that may run on a reserved core, and no other ----------------
def _allowed(pid: int) -> set[int]:
    return set(psutil.Process(pid).cpu_affinity())


def _threads(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")]


def test_confine_moves_every_thread_and_leaves_pinned_processes_alone() -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    code = "import threading, time\nfor _ in range(3):\n    threading.Thread(target=time.sleep, args=(60,)).start()"
    free = subprocess.Popen([sys.executable, "-c", code])
    pinned = subprocess.Popen(["taskset", "-c", str(cores[-1]), sys.executable, "-c", code])
    try:
        # Both have started their three threads (a fixed second was not always enough on a loaded box).
        deadline = time.monotonic() + 60
        while any(len(os.listdir(f"/proc/{p.pid}/task")) < 4 for p in (free, pinned)) and time.monotonic() < deadline:
            time.sleep(0.05)
        reserved = {cores[0]}
        assert confine_process(free.pid, reserved) == 4
        assert all(t == reserved for t in _threads(free.pid))
        assert confine_process(pinned.pid, reserved) == 0  # a training process's own pin stays
        assert _allowed(pinned.pid) == {cores[-1]}
        assert confine_process(free.pid, reserved) == 0  # again: nothing to do
        # The reservation lifted: the threads go back to every core.
        assert confine_process(free.pid, set(), was=reserved, every=cores) == 4
        assert all(t == set(cores) for t in _threads(free.pid))
    finally:
        for proc in (free, pinned):
            proc.kill()
            proc.wait()


# --- measured windows side by side, and one at a time ----------------------------------------------
def _measure(
    windows: MeasureWindows, cell: str, isolate: bool, hold: float, out: dict, inside: threading.Barrier | None
) -> None:
    with windows.measuring("node", cell, isolate) as window:
        if inside is not None:  # all measure at once, however late the scheduler starts a thread
            inside.wait(timeout=60)
        time.sleep(hold)
    out[cell] = window


@pytest.mark.parametrize("isolate", [False, True])
def test_windows_count_the_cells_measuring_at_once(isolate: bool) -> None:
    windows, out = MeasureWindows(), {}
    # Side by side, the three windows meet inside (a 0.3 s hold alone overlapped them only if the three
    # threads started within 0.3 s); one at a time they cannot, and need not.
    inside = None if isolate else threading.Barrier(3)
    threads = [threading.Thread(target=_measure, args=(windows, f"c{i}", isolate, 0.3, out, inside)) for i in range(3)]
    for t in threads:
        t.start()
    with windows.measuring("other-node", "far", isolate) as far:  # another node never counts
        time.sleep(0.1)
    for t in threads:
        t.join()
    counts = sorted(w.overlapping for w in out.values())
    assert far.overlapping == 0
    if isolate:
        assert counts == [0, 0, 0]
        spans = sorted((w.start, w.end) for w in out.values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    else:
        assert counts == [2, 2, 2]


def test_a_cell_waiting_for_its_node_can_be_cancelled() -> None:
    windows = MeasureWindows()
    cancel = threading.Event()

    class Cancelled(Exception):
        pass

    def waiting() -> None:
        if cancel.is_set():
            raise Cancelled

    with windows.measuring("node", "a", True):
        threading.Timer(0.2, cancel.set).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled), windows.measuring("node", "b", True, waiting):
            pass
        assert time.monotonic() - t0 < 30  # uncancelled, it waits for "a" for ever: a generous bound, not a race
    with windows.measuring("node", "c", True) as free:  # the lock was given back
        pass
    assert free.waited_s < 1


# --- a real sweep on simulated GPUs -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_the_nodes_own_processes_run_on_the_reserved_cores(tmp_path: Path) -> None:
    """Ray's raylet and GCS, the steward and its fork server on core 0; the job on core 1."""
    import ray

    from raycolloc.node.steward_handles import get_steward

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    first = f"{cores[0]}-{cores[0]}"
    spec = load(["cluster.reserved_cpus=" + first, "epoch_samples=64"], out_dir=tmp_path)
    result, tables = run_one(spec, tmp_path / "cell")
    assert result.status == "ok", result.summary
    cell, job = tables["cells"].iloc[0], tables["jobs"].iloc[0]
    assert cell["reserved_cpus"] == str(cores[0])
    assert job["cpus"] is not None and str(cores[0]) not in job["cpus"].split(",")
    node = ray.get_runtime_context().get_node_id()
    steward = get_steward(node, spec.config.cluster, spec.config.mode.pipe_root)
    info = ray.get(steward.info.remote())
    try:
        me = psutil.Process(info.pid)
        raylet = next(p for p in me.parents() if p.name() == "raylet")
        gcs = [p for p in psutil.Process().children() if p.name() == "gcs_server"]
        checked = [me, raylet, *gcs, *me.children()]  # the fork server is the steward's child
        assert len(checked) >= 3
        for proc in checked:
            assert all(t == {cores[0]} for t in _threads(proc.pid)), (proc.name(), _threads(proc.pid))
        assert os.sched_getaffinity(0) == set(cores)  # the driver got its cores back at the sweep's end
    finally:
        ray.get(steward.reserve.remote("none"))  # the session's next tests find every core again
    assert _allowed(raylet.pid) == set(cores)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_workers_started_in_the_spawning_window_start_on_every_core_then_are_confined(tmp_path: Path) -> None:
    """A new worker inherits the raylet's cores: outside the window, the reserved one only (15 trainers
    of a 16-job cell took 30 s on an H200's one reserved core); inside, every core, confined after."""
    import ray

    from raycolloc.node.steward_handles import get_steward

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")

    @ray.remote(num_cpus=0)
    class Probe:
        def __init__(self) -> None:
            self.at_start = os.sched_getaffinity(0)  # before anything could move it

        def seen(self) -> tuple[int, set[int]]:
            return os.getpid(), self.at_start

    def started(tag: str) -> tuple[int, set[int]]:  # a worker of its own (a runtime_env no other has)
        actor = Probe.options(runtime_env={"env_vars": {"RAYCOLLOC_PROBE": f"{tag}-{time.time_ns()}"}}).remote()
        return ray.get(actor.seen.remote(), timeout=120)

    spec = load(["epoch_samples=64"], out_dir=tmp_path)
    node = ray.get_runtime_context().get_node_id()
    steward = get_steward(node, spec.config.cluster, spec.config.mode.pipe_root)
    try:
        ray.get(steward.reserve.remote(f"{cores[0]}-{cores[0]}"))
        _, outside = started("outside")
        assert outside == {cores[0]}  # the cause: one core for every worker Ray starts now
        assert ray.get(steward.spawning.remote(True)) is True
        pid, inside = started("inside")
        assert inside == set(cores)
        ray.get(steward.spawning.remote(False))
        assert all(t == {cores[0]} for t in _threads(pid))  # confined once up
    finally:
        ray.get(steward.reserve.remote("none"))  # the session's next tests find every core again


@pytest.mark.slow
def test_cells_side_by_side_are_counted_and_isolation_stops_it(tmp_path: Path) -> None:
    """Two cells on two simulated GPUs of one node: measured at once, then one at a time."""
    # Steps that sleep (tests/sleepy_workload.py): two CPU-bound cells on a 2-core machine slow each
    # other's set-up. Side by side, the two jobs' first steps wait for each other (``meet``), so their
    # windows overlap by that order whatever the set-ups' skew on a loaded machine; one at a time they
    # need not meet (and a measurement held for one cell must not wait on the other's).
    args = ["-m", "workload=python", "workload.entry=tests.sleepy_workload:build", "cluster=local", "seed=0,1"]
    args += ["epoch_samples=100000000", "repeats=1", "epoch_time_s=3", "cluster.num_gpus=2", f"out_dir={tmp_path}"]

    def cells(sweep: Path, *extra: str) -> pd.DataFrame:
        proc = run_cli([*args, f"hydra.sweep.dir={sweep}", *extra], cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = pd.concat(pd.read_parquet(p) for p in sweep.rglob("cells.parquet"))
        assert len(found) == 2
        return found.assign(stdout=proc.stdout)

    beside = cells(tmp_path / "beside", f"workload.args={{meet_dir:'{short_tmp('meet')}',meet:2}}")
    assert list(beside["overlapping_cells"]) == [1, 1] and not beside["isolated"].any()
    a, b = beside.sort_values("measured_start_ts").to_dict("records")
    assert a["measured_end_ts"] > b["measured_start_ts"]  # the jobs' own windows overlapped
    assert "side by side: 2 of 2 cells" in beside["stdout"].iloc[0]
    assert "cluster.isolate_measurement=true" in beside["stdout"].iloc[0]
    alone = cells(tmp_path / "alone", "cluster.isolate_measurement=true", "+rerun=true")
    assert list(alone["overlapping_cells"]) == [0, 0] and alone["isolated"].all()
    a, b = alone.sort_values("measured_start_ts").to_dict("records")
    assert a["measured_end_ts"] <= b["measured_start_ts"]
    assert "each node measured one cell at a time" in alone["stdout"].iloc[0]


def test_finding_mps_daemons_does_not_trust_a_shared_process_info(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil keeps one Process object per pid across process_iter calls; the quiet cores' scan in
    another steward thread rewrote its ``info`` while the naive mode looked for MPS daemons, and a
    naive x7 cell on 2 x H200 failed with KeyError: 'pid'. The lookups read the process itself."""
    import psutil

    from raycolloc.node import reserve
    from raycolloc.node.modes import mps

    me = psutil.Process()
    me.info = {"cmdline": me.cmdline()}  # what the other thread's iteration left there: no pid, no name
    monkeypatch.setattr(psutil, "process_iter", lambda attrs=None: iter([me]))
    assert mps.find_control_daemons() == []  # this process is no MPS daemon; before: KeyError: 'pid'
    me.info = {"pid": me.pid}  # and the other way round: the scan read a cmdline that was not there
    assert reserve._names("session_2026", me) is False
