"""Issue 29, items 2 and 7: SIGTERM ends a sweep as Ctrl-C does; a steward's death and a full disk
leave nothing running and say so in one line.

The sweeps run the real command line with a local Ray instance and simulated GPUs of their own
(``RAYCOLLOC_SIM_ROOT``), in a session of their own, so every process they start can be found.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from raycolloc.results.store import read_cell

from . import sleepy_workload
from .conftest import ROOT, run_cli, sweep_command
from .test_faults import assert_clean, daemons_under, one_result_per_cell, short_root, wait_for
from .test_malformed_inputs import run_main

# Epochs of 4 s (a time budget, however fast this machine trains): a signal sent once the second cell
# warms up lands inside it, after the first (the larger, run first) was written. The jobs' steps sleep
# (tests/sleepy_workload.py): a budget only holds the cell open, and a tiny_cnn epoch of 4 s kept a core
# busy for 4 s on a 2-core machine whose suite is bound by its CPU.
SLEEPY = sleepy_workload.NAME
ISSUE_ARGS = [
    "-m",
    *sleepy_workload.WORDS,
    "cluster=local",
    "repeats=1",
    "degree=1,2",
    "mode=mps",
    "epoch_samples=1000000",
    "epoch_time_s=4",
    "cluster.max_concurrent_cells=1",
]


def _start(args: list[str], tmp_path: Path, log: Path) -> subprocess.Popen[str]:
    """The sweep in the background, in a session of its own (a process group, as `timeout` makes)."""
    env = {**os.environ, "RAYCOLLOC_SIM_ROOT": str(tmp_path / "sim")}
    with open(log, "w") as fh:
        return subprocess.Popen(
            sweep_command(args, own_ray=True),
            cwd=ROOT,
            env=env,
            text=True,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _started_by(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """The sweep's processes: its Ray instance's (GCS, raylet, agents, workers) and theirs."""
    return [
        proc_ for proc_ in psutil.process_iter() if _session(proc_) == proc.pid and proc_.pid != proc.pid
    ] + psutil.Process(proc.pid).children(recursive=True)


def _session(proc: psutil.Process) -> int | None:
    try:
        return os.getsid(proc.pid)
    except OSError:
        return None


def _alive(procs: list[psutil.Process]) -> list[str]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {p.name()}")
        except psutil.Error:
            continue
    return left


def _kill_session(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_sigterm_mid_mps_cell_exits_143_leaves_nothing_and_a_rerun_completes(tmp_path: Path) -> None:
    """`timeout -s TERM N python -m raycolloc.sweep -m degree=1,2 mode=mps ...`: the group gets SIGTERM."""
    root, out, log = short_root("term"), tmp_path / "out", tmp_path / "first.log"
    args = [*ISSUE_ARGS, f"mode.pipe_root={root}", f"out_dir={out}"]
    proc = _start(args, tmp_path, log)
    try:
        wait_for(lambda: f"{SLEEPY}-mps-x1: warm-up" in log.read_text(), 400, "the second MPS cell's warm-up")
        started = _started_by(proc)
        assert daemons_under(root)  # the MPS cell's daemon serves
        # As GNU `timeout` does: SIGTERM to the command, then to its process group (the command again,
        # and the local Ray instance's processes): the driver gets it twice, and takes it as one.
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=240)
    finally:
        _kill_session(proc)
    output = log.read_text()
    assert code == 143, output[-3000:]
    assert "terminated (SIGTERM)" in output and "Traceback" not in output, output[-3000:]
    assert "SIGTERM again" not in output, output[-3000:]  # timeout's echo is not a second signal
    assert "SIGTERM received" not in output  # Ray's native handler (abort, exit 134) did not run
    assert not _alive(started), _alive(started)  # no process of its Ray instance is left
    # The cell written before the signal is whole; the interrupted one left no table, not even a temp file.
    (written,) = out.rglob(f"{SLEEPY}-mps-x2/cells.parquet")
    read_cell(written.parent)
    assert not list(out.rglob(f"{SLEEPY}-mps-x1/*.parquet")), list(out.rglob(f"{SLEEPY}-mps-x1/*"))
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], list(out.rglob("*"))
    assert_clean(root, tmp_path / "sim")  # the simulated MPS daemon stopped, nothing of the GPU left
    # Nothing is left to find, so the re-run joins the session's instance, its steward and fork server
    # already warm (as the SIGINT test's re-run does): a second Ray start of its own cost ~30 s on CI.
    rerun = run_cli(args, cwd=ROOT, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "2 of 2 cells have a result" in rerun.stdout
    assert rerun.stdout.count("reused; +rerun=true runs it again") == 1  # the x2 cell; x1 trained
    cells = one_result_per_cell(out)
    assert sorted(cells["degree"]) == [1, 2] and set(cells["status"]) == {"ok"}
    assert_clean(root)


@pytest.mark.slow
def test_a_second_signal_ends_the_sweep_at_once(tmp_path: Path) -> None:
    """SIGTERM to the driver alone (as Kubernetes sends it), then Ctrl-C: the second ends it at once."""
    root, log = short_root("twice"), tmp_path / "run.log"
    args = [*ISSUE_ARGS, f"mode.pipe_root={root}", f"out_dir={tmp_path / 'out'}"]
    proc = _start(args, tmp_path, log)
    try:
        wait_for(lambda: f"{SLEEPY}-mps-x2: warm-up" in log.read_text(), 400, "the MPS cell's warm-up")
        os.kill(proc.pid, signal.SIGTERM)
        # Inside the first signal's cancelling (about a second here): once the driver says it began,
        # not after a fixed pause (a loaded box that has not yet run the SIGTERM handler would take the
        # two as pending together, SIGINT first, and end 143).
        wait_for(lambda: "interrupted: cancelling" in log.read_text(), 30, "the first signal's cancelling", every=0.02)
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        _kill_session(proc)
        # What the exit at once left (its steward's daemon) is the doctor's to clean, as a re-run's would,
        # once the steward has followed the driver.
        stewards = [json.loads(p.read_text())["pid"] for p in root.glob("GPU-*/steward.json")]
        wait_for(
            lambda: (
                not any(
                    psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in stewards
                )
            ),
            60,
            "the steward to follow the driver",
        )
        subprocess.run(
            [sys.executable, "-m", "raycolloc.doctor", f"--pipe-root={root}", "--fix"],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
    output = log.read_text()
    assert code == 130, output[-3000:]  # 128 + SIGINT, the signal that ended it
    # At once: the second signal's exit came before the first one's teardown ended (which closes with
    # "terminated (SIGTERM)" and exit 143). Events, not seconds: a loaded machine takes longer over either.
    assert "SIGINT again: exiting now" in output, output[-3000:]
    assert "terminated (SIGTERM)" not in output, output[-3000:]
    assert_clean(root, tmp_path / "sim")


@pytest.mark.slow
def test_a_steward_killed_during_an_mps_cell_leaves_no_daemon_and_no_traceback(tmp_path: Path) -> None:
    root, log = short_root("stew"), tmp_path / "run.log"
    args = [
        *sleepy_workload.WORDS,
        "cluster=local",
        "mode=mps",
        "degree=1",
        "epoch_samples=1000000",
        "epoch_time_s=4",
        f"mode.pipe_root={root}",
        f"out_dir={tmp_path / 'out'}",
    ]
    proc = _start(args, tmp_path, log)
    try:
        wait_for(lambda: "warm-up" in log.read_text(), 400, "the MPS cell's warm-up")
        (owner,) = root.glob("GPU-*/steward.json")
        daemon = json.loads((owner.parent / "daemon.json").read_text())["pid"]
        os.kill(json.loads(owner.read_text())["pid"], signal.SIGKILL)  # the steward, mid-cell
        code = proc.wait(timeout=300)
    finally:
        _kill_session(proc)
    output = log.read_text()
    assert code == 1, output[-3000:]  # the cell has no result: its steward died
    assert "Traceback" not in output, output[-4000:]
    assert "steward died" in output and f"pid {daemon}" in output, output[-3000:]  # said, in one line
    assert not daemons_under(root), daemons_under(root)  # stopped when the sweep ended, not by a later run
    assert_clean(root, tmp_path / "sim")


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "multirun"])
def test_a_full_disk_at_the_start_is_exit_3_naming_the_path_and_the_free_space(
    tmp_path: Path, multirun: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 7: a full disk before the first file (Hydra's multirun.yaml or .hydra/) is exit 3."""
    mount = tmp_path / "full"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("mounting a tmpfs needs root")
    try:
        (mount / "out").mkdir()
        try:  # fill it: the last write (or the close) finds no space
            with open(mount / "fill", "wb") as fh:
                while True:
                    fh.write(b"\0" * 4096)
                    fh.flush()
        except OSError:
            pass
        code, text = run_main(
            [
                *(["-m"] if multirun else []),
                "workload=tiny_cnn",
                "cluster=local",
                "degree=1",
                f"out_dir={mount / 'out'}",
            ],
            capfd,
        )
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert code == 3, text[-3000:]
    assert f"cannot write {mount / 'out'}" in text and f"MiB free on {mount / 'out'}" in text, text[-3000:]
    assert "No space left on device" in text and "Traceback" not in text, text[-3000:]


@pytest.mark.slow
def test_a_script_job_under_the_sweeps_own_ray_has_sigterm_unblocked(tmp_path: Path) -> None:
    """The local Ray instance starts with SIGTERM blocked (so `timeout`'s signal to the group reaches the
    driver alone); its processes inherit the mask, but a job gets SIGTERM back, as when run by hand."""
    script = tmp_path / "mask.py"
    script.write_text(
        "import re\n"
        "status = open('/proc/self/status').read()\n"
        "blocked = int(re.search(r'SigBlk:\\s*([0-9a-f]+)', status).group(1), 16)\n"
        "print(f'sigterm-blocked={bool(blocked & (1 << (15 - 1)))}', flush=True)\n"
    )
    proc = run_cli(
        [
            "workload=script",
            f"workload.command=[python,{script}]",
            "cluster=local",
            "repeats=1",
            "epochs=2",
            f"out_dir={tmp_path / 'out'}",
            f"mode.pipe_root={short_root('mask')}",
        ],
        cwd=tmp_path,
        timeout=300,
        own_ray=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "sigterm-blocked=False" in out and "sigterm-blocked=True" not in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_that_lands_inside_ray_get_keeps_its_exit_status(signum: int, status: int) -> None:
    """CI's stop 42: the queue's SIGTERM landed while the driver waited in ``ray.get``, which re-raises
    the handler's ``Terminated`` as a plain ``KeyboardInterrupt``; the command exited 130, not 143."""
    import threading

    import ray

    from raycolloc.driver import signals

    @ray.remote(num_cpus=0)
    def _sleep() -> None:
        time.sleep(60)

    ref = _sleep.remote()
    signals.install()
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signum))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt) as caught:
            ray.get(ref, timeout=30)
        assert signals.exit_status(caught.value) == status
    finally:
        timer.cancel()
        signals.uninstall()
        ray.cancel(ref, force=True)
