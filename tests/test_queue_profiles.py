"""The queue's profiles measured on the cluster (``queue.profiles=measured``, issue 33): each distinct
workload of a trace profiled once by the advisor's machinery and reused on a re-run; the measured
profile is the job's solo reference for its slowdown; a workload without a profile has its jobs
cancelled with the reason; a bad ``queue.profiles`` exits 2 before anything runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.settings import compose_settings

from .conftest import short_tmp
from .test_queue_ray import _trace


def test_a_bad_profiles_value_exits_2_naming_the_key_and_its_values(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trace = _trace(tmp_path / "t.csv")
    assert main(["replay", str(trace), "queue.profiles=guessed", f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "queue.profiles" in err and "catalog" in err and "measured" in err
    # The simulated cluster's truth is the catalogue: measuring there is refused, by name.
    assert main(["replay", str(trace), "queue.profiles=measured", f"out_dir={tmp_path}"]) == 2
    assert "queue.profiles=measured" in capsys.readouterr().err
    assert not (tmp_path / "queue").exists()


def test_profiles_are_measured_on_ray_and_the_catalogues_on_the_simulated_cluster() -> None:
    assert compose_settings([]).config.queue.profiles == "catalog"
    assert compose_settings(["queue.runner=ray"]).config.queue.profiles == "measured"
    assert compose_settings(["queue.runner=ray", "queue.profiles=catalog"]).config.queue.profiles == "catalog"
    from raycolloc.queue.report import format_summary, summarise

    assert "profiles: measured" in format_summary(summarise("raycolloc", [], None, 0.0, "measured"))
    assert summarise("raycolloc", [], None, 0.0).profiles == "catalog"


def test_a_profile_cell_takes_the_queues_overrides_but_not_its_own_keys() -> None:
    from raycolloc.queue.profiles import profile_common

    words = ("cluster=local", "mode.pipe_root=/tmp/p", "queue.runner=ray", "mode=mps", "workload.model=x")
    assert profile_common(words) == ("cluster=local", "mode.pipe_root=/tmp/p", "epoch_time_s=10")
    assert profile_common(("epoch_samples=512",)) == ("epoch_samples=512",)  # the window given is kept


def _fake_profiled(words: tuple[str, ...], ok: bool) -> Any:
    from dataclasses import replace
    from types import SimpleNamespace

    from raycolloc.queue.catalog import catalog_profile, sim_gpu

    measured = replace(catalog_profile("resnet18/cifar10", sim_gpu("H100-80GB")), gpu_memory_mib=143_771.0)
    profile = measured if ok else None
    return SimpleNamespace(
        profile=profile, reason=None if ok else "its solo cell ended oom", reused=False, cell_dir="c"
    )


def test_each_distinct_workload_is_profiled_once_and_one_without_a_profile_cancels_its_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from raycolloc.queue import profiles
    from raycolloc.queue.state import Store
    from raycolloc.queue.trace import read_trace

    asked: list[Any] = []

    def run_profiles(request: Any, run_dir: Path) -> tuple[list[Any], Path]:
        asked.append(request)
        return [_fake_profiled(w, "workload.model=resnet26" not in w) for w in request.workloads], run_dir

    monkeypatch.setattr(profiles, "run_profiles", run_profiles)
    jobs = read_trace(_trace(tmp_path / "t.csv"))  # six jobs of three workloads
    settings = compose_settings(["queue.runner=ray", "cluster=local"])
    found = profiles.measure_profiles(jobs, settings, tmp_path)
    (request,) = asked  # one sweep of profile cells, one cell per distinct workload
    assert len(request.workloads) == 3 and request.workloads[0][0] == "workload=timm"
    assert found.gpu(settings.gpu).memory_mib == 143_771.0  # the GPU the profiles ran on, not the table's
    assert sorted(found.failed) == ["j1", "j4"] and sorted(found.by_job) == ["j2", "j3", "j5", "j6"]
    out = capsys.readouterr().out
    assert out.count("queue profile ") == 3 and "its 2 job(s) are cancelled" in out
    stand_in = compose_settings(["queue.runner=ray", "cluster=local", "queue.stand_in=tiny_cnn"])
    profiles.measure_profiles(jobs, stand_in, tmp_path)
    assert asked[1].workloads == (("workload=tiny_cnn",),)  # what every job trains is what is profiled
    store = Store(tmp_path / "q.sqlite")
    try:
        store.add(jobs, [None] * len(jobs), 0.0)
        assert sorted(profiles.cancel_unprofiled(store, found, 0.0)) == ["j1", "j4"]
        assert profiles.cancel_unprofiled(store, found, 1.0) == []  # once
        assert store.counts()["cancelled"] == 2 and store.counts()["queued"] == 4
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "q.sqlite") as db:
        (detail,) = db.execute("SELECT detail FROM events WHERE kind='cancelled' AND job_id='j1'").fetchone()
    assert "no profile: its solo cell ended oom" in detail


@pytest.mark.slow
def test_a_ray_replay_measures_each_workload_once_reuses_it_and_reports_slowdown_against_it(
    tmp_path: Path, ray_local: None
) -> None:
    import pandas as pd

    from raycolloc.queue.rayreplay import replay_ray

    pipe_root = short_tmp("rcq")
    words = ["cluster=local", "cluster.num_gpus=2", f"mode.pipe_root={pipe_root}", "queue.runner=ray"]
    words += ["queue.stand_in=tiny_cnn", "epoch_samples=512", f"out_dir={tmp_path}"]
    trace = tmp_path / "three.csv"  # convnext_atto is not in the catalogue: measured, it needs not be
    rows = [f"j{i},{0.3 * i:.1f},timm,{m},cifar10,256" for i, m in enumerate(("resnet18", "convnext_atto"), 1)]
    trace.write_text(
        "\n".join(["job_id,submit_s,kind,model,dataset,samples", *rows, "j3,0.9,timm,resnet18,cifar10,256"]) + "\n"
    )
    first = replay_ray(trace, compose_settings(words))
    again = replay_ray(trace, compose_settings([*words, "queue.policy=exclusive"]))  # another run dir
    for outcome, source in ((first, "measured"), (again, "reused")):
        assert outcome.summary.profiles == "measured" and outcome.summary.complete
        (entry,) = json.loads((outcome.directory / "profiles.json").read_text())["workloads"]
        assert entry["source"] == source and entry["jobs"] == ["j1", "j2", "j3"]
        rate = entry["profile"]["samples_per_s"]
        jobs = pd.read_parquet(outcome.jobs_file)
        assert jobs.alone_s.tolist() == pytest.approx([256 / rate] * 3)  # the measured rate is the reference
        assert (jobs.slowdown == jobs.run_s / jobs.alone_s).all()
        # The bound is judged on training speed: the rate alone over the rate the attempt trained at.
        attempts = pd.read_parquet(outcome.directory / "attempts.parquet").set_index("job_id")
        speed = rate / attempts.loc[jobs.job_id, "samples_per_s"].to_numpy()
        assert jobs.speed_slowdown.tolist() == pytest.approx(list(speed))
        assert outcome.summary.max_slowdown == pytest.approx(max(speed))
    measured = list(tmp_path.glob("queue/*/profile/*/cells.parquet"))
    assert len(measured) == 1  # profiled once: the second run's profile dir only points at the first's
    assert list((again.directory / "profile").glob("*/reused.json"))
