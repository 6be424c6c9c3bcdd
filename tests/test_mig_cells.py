"""MIG cells end to end on real Ray with simulated GPUs: layouts applied, jobs pinned, layouts restored.

The simulated backend enforces the MIG tables' profiles and placements. Stewards are named per
``cluster.gpu_model`` and ``cluster.sim_mig_mode`` (``steward_name``), and each owns its own
simulated GPUs, so tests that pre-create a layout (``sim_mig_mode=enabled``, as an administrator
would with nvidia-smi, from this process on the simulated devices' state) do not disturb the
``auto`` stewards other tests use.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import ray

from raycolloc.config import ConfigError
from raycolloc.driver.preflight import check_cluster
from raycolloc.node.mig.profiles import get_gpu_model
from raycolloc.node.modes.base import ModeError
from raycolloc.node.modes.mig import apply_instances
from raycolloc.node.steward_handles import get_steward

from .conftest import ROOT, load, run_cli, run_one, sim_backend

A100 = "A100-SXM4-40GB"
STUDY_PROFILES = {1: "7g.40gb", 2: "3g.20gb", 3: "2g.10gb", 7: "1g.5gb"}


def _inst(model: str, gi: str, start: int, *cis: tuple[str, int]) -> tuple[int, int, list[tuple[int, int]]]:
    """An instance for ``apply_instances``: GI profile at ``start`` with ``(ci, ci_start)`` CIs."""
    prof = get_gpu_model(model).profile(gi)
    cis = cis or ((f"{prof.compute_slices}c", 0),)  # by default one CI spanning the GI
    return prof.profile_id, start, [(prof.ci_profile(c).nvml_index, s) for c, s in cis]


# What an administrator left on the GPU: none of the study's layouts, with partial CIs and
# instances away from the planner's first-fit placements, so a restore must get every start right.
EXISTING = [_inst(A100, "4g.20gb", 0, ("2c", 2), ("1c", 0)), _inst(A100, "2g.10gb", 4), _inst(A100, "1g.5gb", 6)]


def _job(tmp_path: Path, overrides: list[str]):  # noqa: ANN202
    return load(["mode=mig", "epoch_samples=128", f"cluster.gpu_model={A100}", *overrides], out_dir=tmp_path)


def _steward(job) -> Any:  # noqa: ANN001
    """The steward a cell of ``job`` uses (created here if no cell has used it yet)."""
    return get_steward(ray.get_runtime_context().get_node_id(), job.config.cluster, job.config.mode.pipe_root)


def _gpus(steward: Any) -> list[Any]:
    return list(ray.get(steward.info.remote(), timeout=60).gpus)


def _records(steward: Any) -> dict[str, list[Any]]:
    """Every simulated GPU's instances exactly as read (ids included)."""
    return {g.uuid: ray.get(steward.mig_layout.remote(g.uuid), timeout=60) for g in _gpus(steward)}


def _shape(records: list[Any]) -> list[tuple[Any, ...]]:
    """A layout as placements: GI profile and start, CI profiles and starts (ids are the driver's)."""
    return sorted(
        (r.profile_id, r.start, tuple(sorted((c.profile_id, c.start) for c in r.compute_instances))) for r in records
    )


def _planned(instances: list[Any]) -> list[tuple[Any, ...]]:
    """What :func:`_shape` reads back after ``apply_instances`` created ``instances``."""
    return sorted((gi, start, tuple(sorted(cis))) for gi, start, cis in instances)


def _layouts(steward: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {uuid: _shape(records) for uuid, records in _records(steward).items()}


def _set_layout(job, instances: list[Any]) -> None:  # noqa: ANN001
    """What an administrator does with nvidia-smi on every GPU: MIG on, then these instances."""
    backend = sim_backend(job)
    for gpu in backend.gpus():
        apply_instances(backend, gpu.uuid, [])
        backend.set_mig_mode(gpu.uuid, True)
        apply_instances(backend, gpu.uuid, instances)


def _run(job, tmp_path: Path):  # noqa: ANN001, ANN202
    return run_one(job, tmp_path / "cell")


def _infos(steward: Any) -> list[Any]:
    return [ray.get(steward.info.remote(), timeout=60)]


def _assert_pinned(jobs: pd.DataFrame, degree: int, profile: str) -> None:
    assert len(jobs) == degree
    assert jobs["mig_uuid"].notna().all() and jobs["mig_uuid"].str.startswith("MIG-").all()
    assert jobs["mig_uuid"].nunique() == degree, "every job has its own MIG device"
    assert (jobs["cuda_visible_devices"] == jobs["mig_uuid"]).all()
    assert set(jobs["mig_profile"]) == {profile}


def test_cli_sweep_runs_the_study_layouts_one_mig_device_per_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        [
            "-m",
            "degree=1,2,3,7",
            "mode=mig",
            "workload=tiny_cnn",
            "cluster=local",
            "repeats=1",
            f"cluster.gpu_model={A100}",
            "mig.allow_reconfigure=true",
            "epoch_samples=128",
            f"out_dir={out}",
        ],
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cells = pd.concat([pd.read_parquet(p) for p in sorted(out.rglob("cells.parquet"))], ignore_index=True)
    jobs = pd.concat([pd.read_parquet(p) for p in sorted(out.rglob("jobs.parquet"))], ignore_index=True)
    assert sorted(cells["degree"]) == [1, 2, 3, 7]
    assert set(cells["mode"]) == {"mig"} and set(cells["status"]) == {"ok"}, cells[["degree", "status", "reason"]]
    assert set(jobs["status"]) == {"ok"}
    for _, cell in cells.iterrows():
        _assert_pinned(jobs[jobs.cell_id == cell["cell_id"]], cell["degree"], STUDY_PROFILES[cell["degree"]])


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("sim_mig_mode, existing", [("auto", None), ("enabled", EXISTING)], ids=["mig-off", "layout"])
def test_cell_restores_the_layout_it_found(tmp_path: Path, sim_mig_mode: str, existing: list[Any] | None) -> None:
    job = _job(tmp_path, ["degree=2", "mig.allow_reconfigure=true", f"cluster.sim_mig_mode={sim_mig_mode}"])
    steward = _steward(job)
    if existing is not None:
        _set_layout(job, existing)
    before = _layouts(steward)
    assert all(layout == _planned(existing or []) for layout in before.values())
    outcome, t = _run(job, tmp_path)
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    _assert_pinned(t["jobs"], 2, "3g.20gb")
    assert _layouts(steward) == before
    assert ray.get(steward.held.remote()) == {}


@pytest.mark.usefixtures("ray_local")
def test_layout_is_restored_after_a_job_crashes(tmp_path: Path) -> None:
    job = _job(
        tmp_path,
        [
            "degree=3",
            "mig.allow_reconfigure=true",
            "cluster.sim_mig_mode=enabled",
            "trainer.fault=exit",
            "trainer.fault_job=1",
        ],
    )
    steward = _steward(job)
    _set_layout(job, EXISTING)
    before = _layouts(steward)
    outcome, t = _run(job, tmp_path)
    jobs = t["jobs"].set_index("job_index")
    assert jobs.loc[1, "status"] == "error" and "died" in jobs.loc[1, "error"]
    assert (jobs.loc[[0, 2], "status"] == "ok").all() and (jobs.loc[[0, 2], "epoch2_s"] > 0).all()
    assert outcome.status == "partial" and t["cells"].loc[0, "n_ok"] == 2
    _assert_pinned(t["jobs"], 3, "2g.10gb")
    assert _layouts(steward) == before


@pytest.mark.usefixtures("ray_local")
def test_mig_mode_off_is_refused_by_the_preflight_and_the_steward(tmp_path: Path) -> None:
    job = _job(tmp_path, ["degree=2", "mig.allow_reconfigure=true", "cluster.sim_mig_mode=disabled"])
    steward = _steward(job)
    before = _records(steward)
    # The pre-flight skips the cell (a result row; the sweep's other cells run), naming the fix.
    assert "nvidia-smi -i 0 -mig 1" in check_cluster([job], _infos(steward))[job.cell_id]
    # Past the pre-flight, the steward itself refuses (the mig mode) and leaves the GPU as it was.
    gpu = _gpus(steward)[0]
    assert gpu.index == 0
    with pytest.raises(ModeError, match=r"MIG mode is disabled on GPU 0 .*nvidia-smi -i 0 -mig 1"):
        ray.get(steward.prepare.remote(job, gpu.uuid), timeout=60)
    assert ray.get(steward.held.remote()) == {}
    # Through the engine: a skipped row, no job started.
    outcome, t = _run(job, tmp_path)
    assert outcome.status == "skipped" and "nvidia-smi -i" in t["cells"].loc[0, "reason"]
    assert set(t["jobs"]["status"]) == {"skipped"} and t["jobs"]["pid"].isna().all()
    assert _records(steward) == before
    assert not any(g.mig_enabled for g in _gpus(steward))
    # The refused prepare had claimed the GPU's directory: the lease ends, as a sweep's does (the session's
    # doctor finds no directory left on its pipe root).
    assert ray.get(steward.release_gpu.remote(gpu.uuid), timeout=60).errors == ()


@pytest.mark.usefixtures("ray_local")
def test_existing_layout_is_used_as_is_or_refused_without_allow_reconfigure(tmp_path: Path) -> None:
    job = _job(tmp_path / "refused", ["degree=2", "cluster.sim_mig_mode=enabled", "mig.allow_reconfigure=false"])
    steward = _steward(job)
    _set_layout(job, EXISTING)
    before = _records(steward)
    outcome, t = _run(job, tmp_path / "refused")
    assert outcome.status == "error"
    reason = t["cells"].loc[0, "reason"]
    assert "ModeError" in reason and "set mig.allow_reconfigure=true" in reason
    assert t["jobs"]["pid"].isna().all()
    assert _records(steward) == before
    # The layout the cell needs, created by an administrator: used as it is, nothing recreated.
    _set_layout(job, [_inst(A100, "3g.20gb", 4), _inst(A100, "3g.20gb", 0)])
    before = _records(steward)
    outcome, t = _run(job, tmp_path / "used")
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    _assert_pinned(t["jobs"], 2, "3g.20gb")
    assert _records(steward) == before


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("degree, slices", [(4, 8), (7, 14)])
def test_impossible_layout_is_refused_before_anything_starts(tmp_path: Path, degree: int, slices: int) -> None:
    job = _job(
        tmp_path, [f"degree={degree}", f"mig.layout=[{','.join(['2g.10gb'] * degree)}]", "mig.allow_reconfigure=true"]
    )
    steward = _steward(job)
    before = _records(steward)
    with pytest.raises(ConfigError, match=rf"needs {slices} compute slices; {A100} has 7"):
        check_cluster([job], _infos(steward))
    assert _records(steward) == before and ray.get(steward.held.remote()) == {}


def test_cli_refuses_an_impossible_layout_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        [
            "-m",
            "degree=4",
            "mode=mig",
            "workload=tiny_cnn",
            "cluster=local",
            f"cluster.gpu_model={A100}",
            "mig.layout=[2g.10gb,2g.10gb,2g.10gb,2g.10gb]",
            "mig.allow_reconfigure=true",
            f"out_dir={out}",
        ],
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert f"needs 8 compute slices; {A100} has 7" in proc.stdout + proc.stderr
    assert not list(out.rglob("*.parquet"))


@pytest.mark.usefixtures("ray_local")
def test_mig_cell_on_h100_samples_every_instance_with_gpm(tmp_path: Path) -> None:
    job = load(
        ["mode=mig", "degree=2", "epoch_samples=256", "cluster.gpu_model=H100-80GB", "mig.allow_reconfigure=true"],
        out_dir=tmp_path,
    )
    outcome, t = _run(job, tmp_path)
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    jobs, tel = t["jobs"], t["telemetry"]
    _assert_pinned(jobs, 2, "3g.40gb")
    mig = tel[tel.scope == "mig"]
    assert set(mig["mig_uuid"]) == set(jobs["mig_uuid"])
    assert set(mig["source"]) == {"sim-gpm"} and set(tel["source"]) == {"sim-gpm"}
    assert mig.groupby("mig_uuid")["gi_id"].nunique().eq(1).all() and mig["gi_id"].nunique() == 2
    # Each instance's own activity: every job kept its GPU instance busy at some point.
    assert (mig.groupby("mig_uuid")["sm_active"].max() > 0).all()


@pytest.mark.usefixtures("ray_local")
def test_two_compute_instances_share_one_gpu_instance(tmp_path: Path) -> None:
    job = _job(tmp_path, ["degree=2", "mig.layout=[{gi: 7g.40gb, ci: [3c, 3c]}]", "mig.allow_reconfigure=true"])
    steward = _steward(job)
    before = _layouts(steward)
    # The layout exists only while the cell runs: watch it from beside the cell.
    seen: list[list[tuple[Any, ...]]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(s for s in _layouts(steward).values() if s)
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        outcome, t = _run(job, tmp_path)
    finally:
        done.set()
        watcher.join(timeout=30)
    assert outcome.status == "ok", t["cells"].loc[0, "reason"]
    _assert_pinned(t["jobs"], 2, "3c.7g.40gb")
    gi = get_gpu_model(A100).profile("7g.40gb")
    three_c = gi.ci_profile("3c").nvml_index
    # One GPU instance holding both 3c compute instances, and never a second GPU instance.
    assert [(gi.profile_id, 0, ((three_c, 0), (three_c, 4)))] in seen
    assert all(len(layout) == 1 for layout in seen)
    assert _layouts(steward) == before
