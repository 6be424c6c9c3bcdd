"""A process a test leaves running fails the whole run, also under xdist, where each worker's session checks
its own directory and its own exit status never reached the run's (CI 2026-12-03: "the test session left
behind: process ... nvidia-cuda-mps-server", and the run passed)."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, SHORT_TMP, SYSTEM_TMP
from .session_dirs import GRACE_ENV, TMP_CHECK_ENV, temp_suspects

LEAVE = "RAYCOLLOC_TEST_LEAVE_A_PROCESS"
LEAVE_TMP = "RAYCOLLOC_TEST_LEAVE_IN_TMP"

if os.environ.get(LEAVE):  # collected only in the run the test below starts

    def test_leaves_a_process_running_in_its_sessions_directory() -> None:
        marker = SHORT_TMP / "left-on-purpose"
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(marker)], start_new_session=True)


if os.environ.get(LEAVE_TMP):

    def test_leaves_a_directory_in_the_machines_temporary_directory() -> None:
        Path(os.environ[LEAVE_TMP]).mkdir()


def _inner_run(test: str, env: dict[str, str], *args: str) -> tuple[int, str]:
    """A pytest run of its own of ``test`` (a controller, not this run's worker), with ``env`` added; its
    exit status and output."""
    full = {**os.environ, **env}
    for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST"):
        full.pop(key, None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args, "-p", "no:cacheprovider", f"tests/test_session_left.py::{test}"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow  # a pytest run of its own
def test_what_a_run_leaves_in_the_machines_temporary_directory_fails_it() -> None:
    left = Path(SYSTEM_TMP) / f"raycolloc-test-left-on-purpose-{os.getpid()}"
    try:
        code, out = _inner_run("test_leaves_a_directory_in_the_machines_temporary_directory", {LEAVE_TMP: str(left)})
    finally:
        shutil.rmtree(left, ignore_errors=True)
    assert "1 passed" in out and code == 1, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("the test session left behind: ")]
    assert said and str(left) in said[0], out[-3000:]


@pytest.mark.slow  # a pytest run of its own
def test_a_process_an_xdist_worker_left_fails_the_run() -> None:
    # The session's grace for what still runs, shortened: the process left here never ends (it waited 30 s).
    code, out = _inner_run(
        "test_leaves_a_process_running_in_its_sessions_directory", {LEAVE: "1", GRACE_ENV: "2"}, "-n", "2"
    )
    assert "1 passed" in out, out[-3000:]
    assert code == 1, out[-3000:]
    assert "the test session left behind: process" in out and "left-on-purpose" in out, out[-3000:]


def test_the_temporary_directorys_suspects_are_read_to_two_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inductor = tmp_path / f"torchinductor_{getpass.getuser()}"
    (inductor / "precompiled_headers").mkdir(parents=True)
    (tmp_path / "raycolloc-test-cache-1").mkdir()
    (tmp_path / "torchinductor_someone_else").mkdir()  # another user's: not this run's
    (tmp_path / "unrelated").mkdir()
    found = temp_suspects(tmp_path)
    assert found == {inductor.name, f"{inductor.name}/precompiled_headers", "raycolloc-test-cache-1"}
    monkeypatch.setenv(TMP_CHECK_ENV, "0")
    assert temp_suspects(tmp_path) == set()
