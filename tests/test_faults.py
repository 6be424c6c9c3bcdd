"""The fault suite (issue 15): CPU, local Ray, simulated GPUs. Each fault is injected into a real
cell or sweep, and each test checks that the results are intact, that there is one result per
cell, that no process or MPS daemon is left, and that the GPU is as it was.

In-process cells share the session's Ray instance (``ray_local``); faults of the driver itself run
the real command line, each with simulated GPUs of its own (``RAYCOLLOC_SIM_ROOT``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import ray

from analysis.load import load_sweeps
from raycolloc.doctor import orphan_trainers
from raycolloc.node.gpu.sim import SimBackend
from raycolloc.node.modes.mps import find_control_daemons
from raycolloc.node.steward_handles import NAMESPACE, steward_name
from raycolloc.results.store import read_cell

from . import sleepy_workload
from .conftest import ROOT, load, run_cli, run_one, short_tmp, sweep_command

_counter = itertools.count()
# Where a test only needs jobs that run for a while (a time budget holds each epoch open for a fault to
# land in), their steps sleep instead of computing.
SLEEPY, SLEEPY_JOB = list(sleepy_workload.WORDS), sleepy_workload.NAME


def short_root(tag: str) -> Path:
    """A private ``mode.pipe_root`` (Unix socket paths must stay short)."""
    return short_tmp(f"rc{tag}{next(_counter)}")


def daemons_under(root: Path) -> list[dict[str, Any]]:
    return [d for d in find_control_daemons() if Path(d["pipe_dir"]).is_relative_to(root)]


def gpu_dirs(root: Path) -> list[Path]:
    """GPU directories a steward keeps under ``root`` (the simulated control's ``sim-bin`` is not one)."""
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != "sim-bin") if root.exists() else []


def orphans(root: Path) -> list[int]:
    """Training processes and fork servers of runs on this pipe root whose trainer or steward is gone."""
    return [p.pid for p in orphan_trainers(root)]


def _sim_left(sim_root: Path | None) -> dict[str, Any]:
    """The simulated GPUs with a MIG instance or a (live) process still on them."""
    if sim_root is None:
        return {}
    return {uuid: state for uuid, state in sim_state(sim_root).items() if state[1] or state[2]}


def assert_clean(root: Path, sim_root: Path | None = None) -> None:
    """No MPS daemon, no GPU directory under the pipe root, no training process without its trainer,
    and (``sim_root``) no simulated GPU with a process or a MIG instance left."""
    deadline = time.monotonic() + 20
    while (daemons_under(root) or gpu_dirs(root) or orphans(root) or _sim_left(sim_root)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)  # a lane may still be releasing its GPU; a killed trainer's process still dying
    assert not daemons_under(root), daemons_under(root)
    assert not gpu_dirs(root), gpu_dirs(root)
    assert not orphans(root), orphans(root)
    if sim_root is not None:  # a sweep of its own (its steward is gone): nothing of it may be left
        left = _sim_left(sim_root)
        assert not left, left
        shutil.rmtree(root, ignore_errors=True)  # the simulated control, its fork server's stale files


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def one_result_per_cell(out: Path) -> pd.DataFrame:
    """The newest result of every config under ``out``, each checked to read back whole."""
    cells = load_sweeps([out]).cells
    assert cells["config_hash"].is_unique
    for cell_dir in cells["cell_dir"]:
        read_cell(cell_dir)
    return cells


# --- faults inside a cell (in-process, the session's Ray instance) ----------------------------------


def _cell(tmp_path: Path, overrides: list[str], during: Callable[[Any], None] | None = None):  # noqa: ANN202
    """Run one cell; ``during(spec)`` runs beside it in a thread (it injects the fault). Its trainers
    are its own (``trainer.reuse_actors=false``), named ``raycolloc:<cell>/<job>``, so a fault can
    find them; an error in ``during`` fails the test."""
    spec = load([*overrides, "trainer.reuse_actors=false"], out_dir=tmp_path)
    errors: list[BaseException] = []

    def inject(spec: Any) -> None:
        try:
            during(spec)  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=inject, args=(spec,), daemon=True) if during else None
    if thread:
        thread.start()
    try:
        ran = spec, *run_one(spec, tmp_path / "cell")
    finally:
        if thread:
            thread.join(timeout=120)
    assert not errors, f"the fault was not injected: {errors[0]!r}"
    return ran


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(
    ("fault", "status", "needle"),
    [
        ("oom", "oom", "injected out of memory"),
        ("error", "error", "injected error"),
        ("exit", "error", "died"),
        ("hang", "hang", "hang: no progress for"),
    ],
)
def test_a_failing_job_is_a_row_and_its_cell_goes_on(tmp_path: Path, fault: str, status: str, needle: str) -> None:
    root = short_root("job")
    t0 = time.monotonic()
    _, outcome, t = _cell(
        tmp_path,
        [
            "degree=2",
            "epoch_samples=256",
            f"trainer.fault={fault}",
            "trainer.fault_job=1",
            "trainer.stall_timeout_s=5",
            "mode=mps",
            f"mode.pipe_root={root}",
        ],
    )
    jobs = t["jobs"].set_index("job_index")
    assert jobs.loc[1, "status"] == status and needle in jobs.loc[1, "error"], jobs.loc[1, "error"]
    assert jobs.loc[0, "status"] == "ok" and jobs.loc[0, "epoch2_s"] > 0
    assert outcome.status == "partial" and t["cells"].loc[0, "n_ok"] == 1
    if fault == "hang":
        # Found by its silence within seconds of the stall timeout, not after trainer.epoch_timeout_s.
        assert time.monotonic() - t0 < 120
        assert t["epochs"].query("job_index == 1")["epoch"].tolist() == [1]  # its warm-up is kept
    read_cell(tmp_path / "cell")
    assert_clean(root)


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(
    ("fault", "status", "needle"),
    [("hang", "hang", "hang: no progress for"), ("error", "error", "injected error")],
)
def test_a_fault_fires_where_a_time_budget_ends_the_epoch_first(
    tmp_path: Path, fault: str, status: str, needle: str
) -> None:
    """Issue 47, item 18: ``trainer.fault=hang epoch_samples=1000000 epoch_time_s=8``: the budget ended
    the epoch long before half its steps, where the fault waited, so the cell was ok and nothing said
    that the fault asked for never came. It comes half-way through the budget now."""
    root = short_root("budget")
    words = ["degree=1", "epoch_samples=1000000", "epoch_time_s=4", f"trainer.fault={fault}"]
    # A stall timeout beyond a loaded CI box's silences (2 s flagged a job that never faulted), within the budget's.
    _, outcome, t = _cell(tmp_path, [*words, "trainer.stall_timeout_s=5", f"mode.pipe_root={root}"])
    job = t["jobs"].set_index("job_index").loc[0]
    assert job["status"] == status and needle in job["error"], job["error"]
    assert outcome.status != "ok"
    assert t["epochs"]["epoch"].tolist() == [1]  # the warm-up ran whole; epoch 2 faulted
    assert_clean(root)


def _kill_actor_when_up(name: str, delay: float) -> Callable[[Any], None]:
    def kill(spec: Any) -> None:
        actor = wait_for(lambda: _actor(name.format(cell=spec.cell_id)), 120, f"actor {name}")
        time.sleep(delay)
        ray.kill(actor, no_restart=True)

    return kill


def _actor(name: str) -> Any:
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


@pytest.mark.usefixtures("ray_local")
def test_a_killed_trainer_actor_is_an_error_row(tmp_path: Path) -> None:
    root = short_root("tk")
    # Epochs of 5 s (a time budget, however fast this machine trains): the kill, 4 s after the actor
    # is up, lands in job 1's set-up or warm-up, and job 0 trains on to the end.
    _, outcome, t = _cell(
        tmp_path,
        [*SLEEPY, "degree=2", "epoch_samples=1000000", "epoch_time_s=5", f"mode.pipe_root={root}"],
        during=_kill_actor_when_up(f"raycolloc:{{cell}}/1-{SLEEPY_JOB}", 4.0),
    )
    jobs = t["jobs"].set_index("job_index")
    assert jobs.loc[1, "status"] == "error" and "died" in jobs.loc[1, "error"], jobs.loc[1, "error"]
    assert jobs.loc[0, "status"] == "ok"
    assert outcome.status == "partial"
    assert_clean(root)


@pytest.mark.usefixtures("ray_local")
def test_an_mps_daemon_killed_mid_cell_is_cleaned_and_the_next_cell_gets_a_new_one(tmp_path: Path) -> None:
    root = short_root("dk")

    def kill_daemon(spec: Any) -> None:
        record = wait_for(lambda: next(root.glob("GPU-*/daemon.json"), None), 120, "the MPS daemon")
        pid = json.loads(record.read_text())["pid"]
        modes.append(record.parent.stat().st_mode & 0o777)  # owner-only: nobody else joins or steers it
        wait_for(lambda: _actor(f"raycolloc:{spec.cell_id}/0-{SLEEPY_JOB}"), 120, "the trainer")
        time.sleep(2)
        os.kill(pid, signal.SIGKILL)

    modes: list[int] = []
    # Epochs of 5 s (a time budget): the kill, 2 s after the trainer is up, lands while the cell runs
    # (a 4096-sample cell once ended first on CI in the steward's test below, its daemon stopped).
    words = [*SLEEPY, "degree=2", "epoch_samples=1000000", "epoch_time_s=5", "mode=mps", f"mode.pipe_root={root}"]
    _, outcome, t = _cell(tmp_path, words, during=kill_daemon)
    assert modes == [0o700]
    assert len(t["cells"]) == 1 and outcome.status in ("ok", "partial", "error")
    assert_clean(root)
    # The GPU is usable again: the next MPS cell starts a daemon of its own, and its jobs join it.
    _, again, t2 = _cell(tmp_path / "again", ["degree=1", "epoch_samples=128", "mode=mps", f"mode.pipe_root={root}"])
    assert again.status == "ok" and t2["jobs"]["mps_client"].all()
    assert_clean(root)


@pytest.mark.usefixtures("ray_local")
def test_a_killed_steward_leaves_a_daemon_the_next_steward_stops(tmp_path: Path) -> None:
    root = short_root("sk")
    # A cluster config of its own: its steward is not the one the other tests use.
    own = ["cluster.gpu_model=A100-80GB", f"mode.pipe_root={root}"]

    def kill_steward(spec: Any) -> None:
        # At once, while the cell is surely running: a cell that ends first has its lane stop the
        # daemon (CI once lost that race with a 3 s pause and a 4096-sample cell).
        wait_for(lambda: next(root.glob("GPU-*/daemon.json"), None), 120, "the MPS daemon")
        wait_for(lambda: _actor(f"raycolloc:{spec.cell_id}/0-{SLEEPY_JOB}"), 120, "the trainer")
        node = ray.get_runtime_context().get_node_id()
        ray.kill(ray.get_actor(steward_name(node, spec.config.cluster), namespace=NAMESPACE), no_restart=True)

    _, outcome, t = _cell(
        tmp_path,
        [*SLEEPY, "degree=1", "epoch_samples=1000000", "epoch_time_s=4", "mode=mps", *own],
        during=kill_steward,
    )
    assert len(t["cells"]) == 1  # the cell is a row, whatever its steward's death cost it
    assert "steward" in str(t["cells"].loc[0, "reason"]).lower() or outcome.status == "ok"
    left = daemons_under(root)
    assert left, "the killed steward's daemon should outlive it (as on a GPU)"
    # The next cell's steward starts, finds the dead steward's daemon through its records, stops it.
    _, again, _ = _cell(tmp_path / "again", ["degree=1", "epoch_samples=128", "mode=naive", *own])
    assert again.status == "ok"
    assert not any(
        psutil.pid_exists(d["pid"]) and psutil.Process(d["pid"]).status() != psutil.STATUS_ZOMBIE for d in left
    )
    assert_clean(root)


# --- faults of the driver (the real command line) ---------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    return {"RAYCOLLOC_SIM_ROOT": str(tmp_path / "sim")}  # simulated GPUs of this test alone


def _popen(args: list[str], env: dict[str, str], log: Path, own_ray: bool = True) -> subprocess.Popen[str]:
    """The sweep in the background, with a local Ray instance of its own (``own_ray``: its death is
    part of the fault) or joining the session's."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            sweep_command(args, own_ray),
            cwd=ROOT,
            env={**os.environ, **env},
            text=True,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def sim_state(sim_root: Path) -> dict[str, Any]:
    """Every simulated GPU's MIG mode, instances and attached processes (what nvidia-smi would show)."""
    state = {}
    for path in sorted(sim_root.glob("*.json")):
        backend = SimBackend.from_state(path)
        for gpu in backend.gpus():
            state[gpu.uuid] = (gpu.mig_enabled, backend.gpu_instances(gpu.uuid), backend.processes(gpu.uuid))
    return state


def _ray_gone(proc: subprocess.Popen[str]) -> None:
    """Kill whatever is left of the sweep's process group (its local Ray instance)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_driver_sigkill_then_rerun_stops_the_daemon_and_completes_each_cell_once(tmp_path: Path) -> None:
    """Issue 15, item 5: the re-run stops the daemon a SIGKILLed driver left; one result per cell."""
    root, out, env = short_root("kill"), tmp_path / "out", _env(tmp_path)
    args = [
        "-m",
        *SLEEPY,
        "cluster=local",
        "repeats=1",
        # Two cells, one at a time: the MPS one's daemon is what the kill leaves (with degree=1,2 the
        # re-run trained three cells of four, ~20 s more of a 2-core machine's suite for the same claims).
        "degree=2",
        "mode=naive,mps",
        f"mode.pipe_root={root}",
        f"out_dir={out}",
        # Epochs of 3 s (a time budget): the daemon seen is still up when the kill lands. With 1,024
        # samples a loaded CI box once saw the lane finish the cell and stop its daemon first.
        "epoch_samples=1000000",
        "epoch_time_s=3",
        "cluster.max_concurrent_cells=1",
    ]
    proc = _popen(args, env, tmp_path / "first.log")
    try:
        # At once: the MPS cells are short, and a lane that finishes them stops their daemon.
        wait_for(lambda: daemons_under(root), 300, "an MPS cell's daemon")
        os.kill(proc.pid, signal.SIGKILL)  # the driver alone, without warning; Ray follows it
        proc.wait(timeout=60)
    finally:
        _ray_gone(proc)
    left = wait_for(lambda: daemons_under(root), 5, "the daemon the driver left")
    done_before = len(list(out.rglob("cells.parquet")))  # cells that ended before the kill

    def doctor() -> str | None:
        report = subprocess.run(
            [sys.executable, "-m", "raycolloc.doctor", f"--pipe-root={root}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return report.stdout if report.returncode == 1 and "left: mps-daemon" in report.stdout else None

    # Once Ray's processes have followed the driver (the steward among them), the daemon is a leftover.
    wait_for(doctor, 60, "the doctor to report the daemon as left behind")
    rerun = run_cli(args, cwd=ROOT, env=env, timeout=600, own_ray=True)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "2 of 2 cells have a result" in rerun.stdout
    assert rerun.stdout.count("reused; +rerun=true runs it again") == done_before  # the rest trained again
    assert not any(
        psutil.pid_exists(d["pid"])
        for d in left
        if psutil.pid_exists(d["pid"]) and psutil.Process(d["pid"]).status() != psutil.STATUS_ZOMBIE
    )
    cells = one_result_per_cell(out)
    assert len(cells) == 2 and set(cells["status"]) == {"ok"}
    assert_clean(root, tmp_path / "sim")


def test_driver_sigint_releases_everything_and_a_rerun_completes(tmp_path: Path) -> None:
    root, out, env = short_root("int"), tmp_path / "out", _env(tmp_path)
    # Epochs of 4 s (a time budget): the interrupt, a second after the MPS cell's daemon appears,
    # lands inside that cell however fast this machine trains.
    args = [
        "-m",
        *SLEEPY,
        "cluster=local",
        "degree=2",
        # One cell (an MPS one, with a daemon to release): a MIG cell beside it cost the re-run ~10 s more,
        # and MIG layouts restored after a cell are tests/test_mig_cells.py's.
        "mode=mps",
        f"mode.pipe_root={root}",
        f"out_dir={out}",
        "epoch_samples=1000000",
        "epoch_time_s=4",
        "cluster.max_concurrent_cells=1",
        "repeats=1",
    ]
    proc = _popen(args, env, tmp_path / "first.log")
    try:
        wait_for(lambda: daemons_under(root), 300, "the MPS cell's daemon")
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=240) == 130
    finally:
        _ray_gone(proc)
    output = (tmp_path / "first.log").read_text()
    assert "cancelling" in output, output[-3000:]
    assert not list(out.rglob(f"{SLEEPY_JOB}-mps-x2/cells.parquet"))  # the interrupted cell is not a result
    assert_clean(root, tmp_path / "sim")
    # Nothing is left to find, so the re-run may join the session's instance (its steward and GPUs).
    rerun = run_cli(args, cwd=ROOT, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    cells = one_result_per_cell(out)
    assert list(cells["mode"]) == ["mps"] and set(cells["status"]) == {"ok"}
    assert_clean(root)


def test_two_sweeps_on_one_output_run_each_cell_once(tmp_path: Path) -> None:
    """Issue 15, item 4: the second sweep is refused naming the first; the first completes."""
    root, out = short_root("two"), tmp_path / "out"
    sweep_dir = out / "multirun" / "same-second"
    args = [
        "-m",
        *SLEEPY,
        "cluster=local",
        "repeats=1",
        "degree=1,2",
        "mode=naive",
        f"out_dir={out}",
        f"mode.pipe_root={root}",
        # Epochs of 3 s (a time budget): the first sweep holds its lock while the second starts and
        # plans (1024-sample cells could end first, and the second would then find the results).
        "epoch_samples=1000000",
        "epoch_time_s=3",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    first = _popen(args, {}, tmp_path / "first.log", own_ray=False)
    try:
        lock = out / ".raycolloc.lock"
        wait_for(lambda: lock.exists() and str(first.pid) in lock.read_text(), 120, "the first sweep's lock")
        second = run_cli(args, cwd=ROOT, timeout=120)
        assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        _ray_gone(first)
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"is in use by another sweep: host {os.uname().nodename}, pid {first.pid}" in second.stderr + second.stdout
    cells = one_result_per_cell(out)
    assert sorted(cells["degree"]) == [1, 2]
    assert len(list(out.rglob("cells.parquet"))) == 2  # each cell ran once
    assert_clean(root)


@pytest.fixture
def small_fs(tmp_path: Path):  # noqa: ANN201
    """A 4 MiB tmpfs (root only): a disk that really fills up."""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_sweep_with_the_path_and_keeps_finished_cells(tmp_path: Path, small_fs: Path) -> None:
    """Issue 15, item 9."""
    root = short_root("full")
    out = small_fs / "out"
    args = [
        "-m",
        "workload=tiny_cnn",
        "cluster=local",
        "repeats=1",
        "degree=1,2",
        "mode=naive",
        f"out_dir={out}",
        f"mode.pipe_root={root}",
        "epoch_samples=4096",
        "cluster.max_concurrent_cells=1",
    ]
    proc = _popen(args, {}, tmp_path / "sweep.log", own_ray=False)
    try:
        first = wait_for(lambda: next(out.rglob("cells.parquet"), None), 300, "the first cell's result")
        try:  # fill the disk while the second cell trains (where the sweep's own files left room for a file)
            with open(small_fs / "filler", "wb") as fh:
                while True:
                    fh.write(b"\0" * (1 << 16))
                    fh.flush()
        except OSError:  # full (CI, 2026-12-02: already at the open, once)
            pass
        code = proc.wait(timeout=300)
    finally:
        _ray_gone(proc)
    output = (tmp_path / "sweep.log").read_text()
    assert code == 3, output[-3000:]
    assert "cannot write" in output and "No space left on device" in output and "MiB free on" in output, output[-3000:]
    assert str(out) in output
    read_cell(first.parent)  # the finished cell is intact
    assert len(list(out.rglob("cells.parquet"))) == 1
    half = [p for p in out.rglob("*.parquet") if p.parent != first.parent]
    assert not half, half  # the cell being written left nothing
    assert_clean(root)


def test_a_corrupt_table_is_set_aside_and_its_cell_runs_again(tmp_path: Path) -> None:
    """Issue 15, item 2: a truncated jobs.parquet is not carried forward, and the summary works."""
    root, out = short_root("bad"), tmp_path / "out"
    args = [
        "-m",
        "workload=tiny_cnn",
        "cluster=local",
        "repeats=1",
        "degree=1,2",
        "mode=naive",
        f"out_dir={out}",
        f"mode.pipe_root={root}",
        "epoch_samples=128",
    ]
    assert run_cli(args, cwd=ROOT).returncode == 0
    jobs = next(p for p in sorted(out.rglob("jobs.parquet")))
    jobs.write_bytes(jobs.read_bytes()[:40])
    rerun = run_cli(args, cwd=ROOT)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert rerun.stdout.count("reused") == 1 and "sweep summary unavailable" not in rerun.stderr
    assert list(out.rglob("*.invalid-*")), "the corrupt result was not set aside"
    cells = one_result_per_cell(out)
    assert sorted(cells["degree"]) == [1, 2] and set(cells["status"]) == {"ok"}
    assert all(str(jobs.parent) != d for d in cells["cell_dir"])
    assert_clean(root)
