"""jobs/queue_why_waited.py: the raycolloc policy's verdict on each GPU at a job's arrival."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from raycolloc.queue.catalog import catalog_profile, sim_gpu
from raycolloc.queue.profiles import PROFILES_FILE, TraceProfiles, WorkloadProfile, read_profiles, write_profiles

ROOT = Path(__file__).resolve().parents[1]
GPU = sim_gpu("H100-80GB")
# resnet152 is busy 85% alone: a time-sliced pair is a wash (a vit_base pair, busy 95%, loses the
# slicer's switches outright: the advisor's naive model, checked on the corpus's busy pairs).
R152, R26 = "resnet152/imagenet", "resnet26/cifar10"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("queue_why_waited", ROOT / "jobs" / "queue_why_waited.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    profiles = TraceProfiles(
        "catalog",
        (
            WorkloadProfile(R152, ("a", "w"), catalog_profile(R152, GPU), None, "catalog"),
            WorkloadProfile(R26, ("b",), catalog_profile(R26, GPU), None, "catalog"),
        ),
    )
    write_profiles(tmp_path / PROFILES_FILE, profiles)
    rows = [  # a resnet152 alone on g0 (naive) all along; g1's resnet26 ended before "w" arrived
        ("a", R152, 0.0, 0.0, 100.0, "g0", "naive", 3.0),
        ("b", R26, 0.0, 0.0, 5.0, "g1", "mps", 2.0),
        ("w", R152, 10.0, 100.0, 150.0, "g0", "naive", 3.0),
    ]
    columns = ["job_id", "workload", "submit_s", "start_s", "end_s", "gpu", "mode", "max_slowdown"]
    pd.DataFrame(rows, columns=columns).to_parquet(tmp_path / "jobs.parquet")
    return tmp_path


def test_profiles_json_reads_back_as_written(run_dir: Path) -> None:
    found = read_profiles(run_dir / PROFILES_FILE)
    assert found.source == "catalog" and [w.jobs for w in found.workloads] == [("a", "w"), ("b",)]
    assert found.workloads[0].profile == catalog_profile(R152, GPU)


def test_a_wash_beside_a_saturating_job_is_refused_and_an_empty_gpu_shown(
    run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    main = _script().main
    assert main([str(run_dir), "w"]) == 0
    out = capsys.readouterr().out
    assert "g0 (naive): may not join" in out and "g1: empty" in out
    # Without the minimum gain the same pair may share (the model calls it +4%).
    assert main([str(run_dir), "w", "queue.min_gain=0"]) == 0
    assert "g0 (naive): may join, +0.04" in capsys.readouterr().out


def test_a_bad_key_or_job_exits_2_naming_it(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    main = _script().main
    assert main([str(run_dir), "w", "queue.nope=1"]) == 2
    assert "queue.nope is not allowed" in capsys.readouterr().err
    assert main([str(run_dir), "zz"]) == 2
    assert "no job zz" in capsys.readouterr().err
    assert main([str(run_dir), "queue.min_gain=0"]) == 2  # no job named
    assert "no job id given" in capsys.readouterr().err
    assert main([str(run_dir), "w", "queue.min_gain=-1e-3"]) == 2  # a number, out of range
    assert "queue.min_gain=-0.001 is not allowed; it must be a number 0..1" in capsys.readouterr().err
    assert main([str(run_dir), "w", "queue.backfill_depth=8", "queue.modes=[mps]"]) == 0  # an int, a list
