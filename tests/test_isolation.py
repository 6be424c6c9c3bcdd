"""Issue 46, item 4: runs on one machine share nothing by default. Each user has its own pipe root,
each user's install its own simulated machine (and so its own GPU UUIDs and MPS pipe directories), and
each install its own simulated ``nvidia-cuda-mps-control``, which no other install rewrites."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from raycolloc.config import register_configs
from raycolloc.localdirs import PIPE_ROOT_ENV, install_key
from raycolloc.node.gpu.sim import SimBackend
from raycolloc.node.gpu.sim_mps import install_control
from raycolloc.node.gpu.simdevice import SimDevices
from raycolloc.node.leftovers import Owner, claim, clean_leftovers, find_leftovers
from raycolloc.node.modes.mps import MpsDaemon, find_control_daemons

from .conftest import load, short_tmp
from .session_dirs import leave_nothing


def test_the_default_roots_are_this_users_and_the_sim_root_this_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The schemas are stored once per process, their defaults read then (a process's environment is
    # its own): stored again here under each environment, and again as the session's at the end.
    try:
        monkeypatch.delenv("RAYCOLLOC_SIM_ROOT", raising=False)
        monkeypatch.delenv(PIPE_ROOT_ENV, raising=False)
        register_configs.cache_clear()
        config = load(["mode=mps"], out_dir=tmp_path).config
        mine = f"/tmp/raycolloc-{os.getuid()}"
        assert config.mode.pipe_root == f"{mine}/mps"
        assert config.cluster.sim_root == f"{mine}/sim-{install_key()}"
        monkeypatch.setenv("RAYCOLLOC_SIM_ROOT", str(tmp_path / "own"))
        monkeypatch.setenv(PIPE_ROOT_ENV, str(tmp_path / "pipes"))
        register_configs.cache_clear()
        config = load(["mode=mps"], out_dir=tmp_path).config
        assert (config.cluster.sim_root, config.mode.pipe_root) == (str(tmp_path / "own"), str(tmp_path / "pipes"))
    finally:
        monkeypatch.undo()
        register_configs.cache_clear()
        register_configs()


def test_two_installs_have_two_simulated_machines_with_different_gpus(tmp_path: Path) -> None:
    one, other = install_key(tmp_path / "a" / "raycolloc"), install_key(tmp_path / "b" / "raycolloc")
    assert one != other and install_key(tmp_path / "a" / "raycolloc") == one
    uuids = [
        [g.uuid for g in SimBackend(tmp_path / f"sim-{key}", "host-0", 2, "H100-80GB").gpus()] for key in (one, other)
    ]
    assert not set(uuids[0]) & set(uuids[1])
    again = [g.uuid for g in SimBackend(tmp_path / f"sim-{one}", "host-0", 2, "H100-80GB").gpus()]
    assert again == uuids[0]  # stable for one install: a re-run finds what a killed run left
    assert SimDevices.stable_uuid("k", "H100-80GB", 0) != SimDevices.stable_uuid("k2", "H100-80GB", 0)


def test_the_simulated_control_lies_with_the_simulated_machine_and_no_install_rewrites_anothers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SimBackend(tmp_path / "sim", "host-0", 1, "H100-80GB")
    control = Path(backend.mps_control(str(tmp_path / "pipes"), "nvidia-cuda-mps-control"))
    assert control.is_relative_to(tmp_path / "sim") and os.access(control, os.X_OK)
    assert not (tmp_path / "pipes").exists()  # the pipe root holds a run's state, not an install's program
    assert install_control(tmp_path / "sim" / "bin") == str(control)  # the same install: the same file
    mine = control.read_text()
    monkeypatch.setattr(sys, "executable", "/elsewhere/venv/bin/python")  # another install's steward
    theirs = Path(install_control(tmp_path / "sim" / "bin"))
    assert theirs != control and control.read_text() == mine and "/elsewhere/venv/bin/python" in theirs.read_text()


def test_a_simulated_daemon_a_dead_run_left_is_stopped_with_its_own_control() -> None:
    """Its record names its control (no ``sim-bin`` under the pipe root any more): the doctor stops it."""
    root = short_tmp("rci")  # short socket paths
    try:
        backend = SimBackend(root / "sim", "host-0", 1, "H100-80GB")
        uuid = backend.gpus()[0].uuid
        daemon = MpsDaemon(uuid, 0, root / "pipes", backend.mps_control(str(root / "pipes"), ""))
        pid = daemon.start()
        assert json.loads(daemon.record.read_text())["control"] == daemon.control
        found, in_use = find_leftovers(root / "pipes")  # no steward record: a dead run's
        assert not in_use and {item.kind for item in found} == {"mps-daemon", "directory"}
        assert clean_leftovers(found, lambda env: backend) == []
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert not [d for d in find_control_daemons() if Path(d["pipe_dir"]).is_relative_to(root)]
        assert not list((root / "pipes").iterdir())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_session_end_names_and_stops_what_still_runs_in_its_directory(tmp_path: Path) -> None:
    """Issue 46, item 5: conftest's session end removes the session's directory, and fails the run
    naming what still ran in it (here a process with its MPS pipe directory there)."""
    root = tmp_path / "session"
    (root / "mps").mkdir(parents=True)
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(root / "mps" / "pipe")}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    try:
        left = leave_nothing(root, grace_s=1.0)
        proc.wait(timeout=10)  # stopped (reaped by leave_nothing, as its child: no status here)
        assert len(left) == 1 and left[0].startswith(f"process {proc.pid} ")
        assert not root.exists()
        assert leave_nothing(root) == []  # nothing there: nothing left
    finally:
        proc.kill()
        proc.wait()


def test_the_session_end_runs_the_doctor_on_its_pipe_root_and_fails_on_what_it_finds(tmp_path: Path) -> None:
    """Issue 46, item 5: ``raycolloc doctor`` is clean after the suite. conftest's session end runs the
    doctor's check on the session's pipe root before removing it: a GPU directory a dead steward left
    there (what ``make test`` left in ``/tmp/raycolloc-mps`` before) fails the run, named."""
    root = tmp_path / "session"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gpu_dir = root / "mps" / "GPU-left-by-a-dead-steward"
    gpu_dir.mkdir(parents=True)
    owner = {**asdict(Owner.me()), "pid": dead.pid}
    (gpu_dir / "steward.json").write_text(json.dumps(owner))
    left = leave_nothing(root, grace_s=0.0, pipe_roots=[root / "mps"])
    assert len(left) == 1
    assert left[0].startswith(f"doctor on {root / 'mps'}: left: directory: directory {gpu_dir} ")
    assert f"(steward pid {dead.pid} " in left[0]
    assert not root.exists()
    (root / "mps" / "GPU-in-use").mkdir(parents=True)  # a running steward's (this process's) is no leftover
    claim(root / "mps" / "GPU-in-use")
    assert leave_nothing(root, grace_s=0.0, pipe_roots=[root / "mps"]) == [] and not root.exists()


def test_this_session_keeps_its_own_state_in_its_own_short_directory() -> None:
    from .conftest import SHORT_TMP

    assert Path(os.environ["RAYCOLLOC_SIM_ROOT"]).is_relative_to(SHORT_TMP)
    assert Path(os.environ["RAYCOLLOC_CACHE_DIR"]).is_relative_to(SHORT_TMP)
    assert Path(os.environ[PIPE_ROOT_ENV]).is_relative_to(SHORT_TMP)
    assert len(str(SHORT_TMP)) <= 20  # an MPS pipe's socket path under it stays under Unix's limit


def test_what_the_session_starts_makes_its_temporary_files_in_the_session_directory() -> None:
    """Issue 46, item 5: the benchmark scripts the suite runs left bench*, overhead*, fanout*, rawsync* and
    multiprocessing's pymp-* in /tmp after every `make test`. A process the session starts makes its
    temporary files under the session's directory (removed at its end), and Ray's stay where a user's do."""
    from .conftest import SHORT_TMP, SYSTEM_TMP

    code = "import os, tempfile; print(tempfile.mkdtemp(prefix='pymp-'), os.environ['RAY_TMPDIR'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    made, ray_tmp = out.stdout.split()
    assert Path(made).is_dir() and Path(made).is_relative_to(SHORT_TMP)
    assert ray_tmp == SYSTEM_TMP and not Path(SYSTEM_TMP).is_relative_to(SHORT_TMP)  # Ray's: RAY_TMPDIR first
