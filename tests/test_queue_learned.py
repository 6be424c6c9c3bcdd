"""A live queue's profiles on Ray (issue 45): an unseen workload is placed alone by a stand-in profile,
its first run alone becomes its profile, kept in the database for the next ``serve``; a run that shared
its GPU teaches nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from raycolloc.advise.profile import Profile
from raycolloc.queue.catalog import catalog_profile, sim_gpu, sim_params
from raycolloc.queue.core import Report, largest_estimate
from raycolloc.queue.learned import PROBE_SETTINGS, LearnedProfiles, probe_profile
from raycolloc.queue.policies import create_policy
from raycolloc.queue.policy import GpuView, Predictor, QueuedJob, Resident
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.simcluster import TelemetryRow
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob

GPU = sim_gpu("H100-80GB")


def _job(job_id: str, entry: str = "mypkg.train:main", samples: int = 1000) -> TraceJob:
    return TraceJob(job_id, 0.0, "python", None, None, entry, None, samples, None)


def _row(t: float, sm: float, mem: float) -> TelemetryRow:
    return TelemetryRow(t, "g0", "naive", 1, sm, 100.0, mem)


def test_a_first_run_alone_becomes_its_workloads_profile_kept_for_the_next_serve(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    profiles = LearnedProfiles(store, GPU, catalog=False)
    first, second = _job("a"), _job("b", samples=4000)
    assert profiles.known(first) is None
    probe = profiles.of(first)
    assert probe.settings == PROBE_SETTINGS and probe.job_mem_mib == largest_estimate(GPU)
    telemetry = [_row(9.0, 0.9, 99.0), _row(11.0, 0.5, 2048.0), _row(13.0, 0.7, 1024.0), _row(31.0, 0.1, 4096.0)]
    shared = Report("a", 1, "ended", 30.0, ("x",), None, 500.0)
    assert profiles.learn(first, shared, 10.0, telemetry, "g0") is None  # it shared its GPU: nothing learned
    alone = Report("a", 1, "ended", 30.0, (), None, 500.0)
    learned = profiles.learn(first, alone, 10.0, telemetry, "g0")
    assert learned is not None
    assert learned.samples_per_s == pytest.approx(1000 / 20.0)  # its length over its run, set-up included
    assert learned.job_mem_mib == 2048.0  # no peak measured (simulated GPU): the most its GPU showed in use
    assert learned.sm_active == pytest.approx(0.6)  # its GPU's SM activity while it ran (rows at 11 and 13 s)
    assert profiles.of(second) == learned  # the next job of the workload is placed by it
    measured = Report("a", 1, "ended", 30.0, (), 3000.0, 500.0)
    assert profiles.learn(first, measured, 10.0, telemetry, "g0") is None  # learned once
    store.close()
    again = LearnedProfiles(Store(tmp_path / "q.sqlite"), GPU, catalog=False)  # the next serve
    assert again.known(second) == learned
    assert again.known(_job("c", entry="other.mod:fn")) is None
    again.store.close()


def test_a_peak_measured_by_the_trainer_is_the_profiles_memory(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    profiles = LearnedProfiles(store, GPU, catalog=False)
    learned = profiles.learn(_job("a"), Report("a", 1, "ended", 12.0, (), 3000.0, 400.0), 2.0, [], "g0")
    assert learned is not None and learned.job_mem_mib == 3000.0 and learned.mem_source == "its first run's peak"
    store.close()


def test_the_catalogue_profiles_a_catalogued_timm_model_when_asked(tmp_path: Path) -> None:
    store = Store(tmp_path / "q.sqlite")
    timm = TraceJob("t", 0.0, "timm", "resnet50", "imagenet64", None, None, 1000, None)
    assert LearnedProfiles(store, GPU, catalog=False).known(timm) is None
    assert LearnedProfiles(store, GPU, catalog=True).known(timm) == catalog_profile("resnet50/imagenet64", GPU)
    store.close()


@pytest.mark.parametrize("policy", ["raycolloc", "exclusive"])
def test_a_job_of_an_unseen_workload_goes_to_an_empty_gpu_and_nothing_joins_it(policy: str) -> None:
    settings = compose_settings(["cluster=local", f"queue.policy={policy}"])
    predictor = Predictor(GPU, sim_params(GPU))
    chosen = create_policy(settings.config.queue, GPU, predictor)
    known = catalog_profile("resnet26/cifar10", GPU)
    probe = probe_profile("python:mypkg.train:main", GPU)

    def queued(job_id: str, p: Profile) -> QueuedJob:
        return QueuedJob(job_id, p.workload, p, p.job_mem_mib, 2.0, 0.0, 0, 10.0)

    busy_one = (Resident("r", known, known.job_mem_mib, 2.0),)
    busy = GpuView("g0", GPU.memory_mib, "mps", busy_one, known.job_mem_mib, 0.3, 0.3, 0.3, None)
    empty = GpuView("g1", GPU.memory_mib, None, (), 0.0, 0.0, 0.0, 0.0, None)
    placed = chosen.place([queued("new", probe)], [busy, empty], 0.0).placements
    assert [(p.job_id, p.gpu_id) for p in placed] == [("new", "g1")]
    held = (Resident("new", probe, probe.job_mem_mib, 2.0),)
    holding = GpuView("g1", GPU.memory_mib, "naive", held, probe.job_mem_mib, 0.9, 0.5, 0.5, 0.0)
    assert chosen.place([queued("k", known)], [holding], 5.0).placements == ()  # nothing beside a probe
