"""Paths a user gives to the doctor are refused by name before it looks at anything (issue 47, item 6).

The sweep's paths (``cluster.sim_root``, ``$RAYCOLLOC_SIM_ROOT``, the compile cache) are in
``test_malformed_inputs.py`` (``CASES``, ``ENV_CASES``); the advisor's ``--fit`` in ``test_advise.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raycolloc.doctor import main as doctor

from .conftest import ROOT


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--out-dir", "/etc/passwd"], "--out-dir /etc/passwd: not a directory"),
        (["--out-dir", "{tmp}/nothing"], "--out-dir {tmp}/nothing: no such directory"),
        (["--pipe-root", "/etc/passwd"], "--pipe-root /etc/passwd: not a directory"),
    ],
    ids=["out-dir-a-file", "out-dir-missing", "pipe-root-a-file"],
)
def test_the_doctor_refuses_a_path_that_is_not_a_directory(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``raycolloc doctor --out-dir /etc/passwd`` raised NotADirectoryError; a missing one was called free."""
    with pytest.raises(SystemExit) as ended:
        doctor([a.replace("{tmp}", str(tmp_path)) for a in args])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and needle.replace("{tmp}", str(tmp_path)) in err, err


def test_the_doctor_still_reports_a_pipe_root_no_run_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe root that does not exist yet (a fresh machine's default) holds nothing: a report, not a refusal."""
    assert doctor(["--pipe-root", str(tmp_path / "none"), "--out-dir", str(tmp_path)]) in (0, 1)
    assert f"out_dir {tmp_path}: free" in capsys.readouterr().out


def test_item_6_as_tried_exits_2_naming_the_path() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "raycolloc.cli", "doctor", "--out-dir", "/etc/passwd"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--out-dir /etc/passwd: not a directory" in proc.stderr and "Traceback" not in proc.stderr
