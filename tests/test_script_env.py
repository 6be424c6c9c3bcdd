"""A script job's environment: inductor's and triton's caches are the node's compile cache (a script that
imports timm left $TMPDIR/torchinductor_<user> behind: README's script job, 2026-12-05), unless the
workload names its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from raycolloc.job.script import ScriptTrainer
from raycolloc.spec import Binding

from .conftest import load

SCRIPT = """\
import json, os, sys
keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
open(sys.argv[1], "w").write(json.dumps({k: os.environ.get(k) for k in keys}))
"""


def _script_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str) -> dict[str, str]:
    script, said = tmp_path / "env.py", tmp_path / "env.json"
    script.write_text(SCRIPT)
    spec = load(["workload=script", f"workload.command=[python,{script},{said}]", *overrides], out_dir=tmp_path)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the trainer sets its own
    trainer = ScriptTrainer()
    trainer.start(spec.jobs[0], Binding(job_index=0, gpu_uuid="GPU-script-env-test", env={}))
    assert trainer.setup().ok
    state = trainer.run_epochs(1, 1)
    trainer.finish()
    assert state.ok, state.error
    return dict(json.loads(said.read_text()))


def test_a_scripts_kernel_caches_are_the_nodes_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("RAYCOLLOC_COMPILE_CACHE", str(tmp_path / "cache"))
    assert _script_env(tmp_path, monkeypatch) == {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache" / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "cache" / "triton"),
    }
    # A workload that names its own inductor cache keeps triton's under it too (torch's default), not ours.
    own = _script_env(tmp_path, monkeypatch, f"+workload.env.TORCHINDUCTOR_CACHE_DIR={tmp_path / 'mine'}")
    assert own == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine"), "TRITON_CACHE_DIR": None}
