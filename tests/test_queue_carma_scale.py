"""CARMA at its scale (issue 44): traces of CARMA's published job lengths; the carma policy's settle
counted from the job's process showing, its monitor's percentile-weighted window, GPUMemNet's bin
errors, an OOM recovered once on an idle GPU; the summary's SM activity over the makespan."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pytest

from raycolloc.config_checks import ConfigError
from raycolloc.config_groups import QueueConfig
from raycolloc.queue.carma import CARMA_GAP_S, CARMA_LENGTHS_MIN, GPUMEMNET_CONFUSION, gpumemnet_offset, monitor_summary
from raycolloc.queue.catalog import CATALOG, catalog_profile, sim_gpu, sim_params
from raycolloc.queue.core import JobStart
from raycolloc.queue.policies import CarmaPolicy, gpumemnet_mib
from raycolloc.queue.policy import GpuView, Predictor, QueuedJob, Resident
from raycolloc.queue.replay import replay
from raycolloc.queue.report import format_policies, sm_activity
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.simcluster import SimCluster
from raycolloc.queue.trace import TraceJob, write_trace
from raycolloc.queue.tracegen import generate
from raycolloc.queue.truth import ModelTruth

GPU = sim_gpu("H100-80GB")
PREDICTOR = Predictor(GPU, sim_params(GPU))
R26 = catalog_profile("resnet26/cifar10", GPU)


def test_a_carma_scale_trace_takes_carmas_published_lengths_and_gap() -> None:
    jobs = generate(600, 3, QueueConfig(trace_scale="carma"), GPU)
    minutes = []
    for job in jobs:
        entry = CATALOG[job.workload]
        length = (job.samples or 0) / entry.samples_per_s / 60
        assert min(abs(length - m) for m in CARMA_LENGTHS_MIN[entry.size]) < 1e-3  # one of its class's lengths
        minutes.append(length)
    assert 3.39 < min(minutes) and max(minutes) < 112.08  # CARMA's shortest (resnet18 x 20 epochs) and MaskRCNN
    assert 20 < statistics.median(minutes) < 45  # the table's tasks run half an hour at the median
    gaps = [b.submit_s - a.submit_s for a, b in zip(jobs, jobs[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(CARMA_GAP_S, rel=0.15)
    assert generate(600, 3, QueueConfig(trace_scale="carma"), GPU) == jobs  # seeded
    short = generate(40, 3, QueueConfig(), GPU)
    assert max((j.samples or 0) / CATALOG[j.workload].samples_per_s for j in short) < 4 * 1.6 * 25.0 + 1e-6
    with pytest.raises(ConfigError, match=r"queue.trace_scale='long' is not allowed; choose one of: short, carma"):
        QueueConfig(trace_scale="long")


def _sim(startup_s: float) -> SimCluster:
    queue = QueueConfig(sim_startup_s=startup_s)
    return SimCluster(1, 1, GPU, ModelTruth(PREDICTOR, 0, queue.sim_mem_error), queue, now=0.0)


def _start(cluster: SimCluster, job_id: str, now: float) -> None:
    cluster.start(JobStart(job_id, 1, R26, R26.job_mem_mib or 0.0, 2.0, 1e9, "n0-g0", "mps", now))


def _first_placement(startup_s: float) -> float:
    """When carma puts a second job beside one placed at 0 s whose process shows after ``startup_s``."""
    cluster, policy = _sim(startup_s), CarmaPolicy(QueueConfig(policy="carma", carma_estimator="bins"), GPU, PREDICTOR)
    _start(cluster, "a", 0.0)
    for t in range(1, 200):
        cluster.advance(float(t))
        job = QueuedJob("b", R26.workload, R26, R26.job_mem_mib or 0.0, 2.0, 0.0)
        if policy.place([job], cluster.views(float(t)), float(t)).placements:
            return float(t)
    raise AssertionError("never placed")


def test_carmas_settle_counts_from_the_process_showing_on_the_gpu() -> None:
    cluster = _sim(40.0)
    _start(cluster, "a", 0.0)
    view = cluster.views(35.0)[0]
    assert view.pending and view.shown_s is None and view.residents[0].mem_used_mib is None  # not seen yet
    assert view.mem_used_mib < (R26.job_mem_mib or 0)  # the monitor sees nothing of it (an MPS server at most)
    cluster.advance(41.0)
    shown = cluster.views(41.0)[0]
    assert not shown.pending and shown.shown_s == 40.0 and shown.sm_active > 0
    # Placed at 0 s either way: the next placement waits its start-up, then the 30 s settle.
    assert _first_placement(0.0) == 30.0
    assert _first_placement(40.0) == 70.0


def test_carmas_monitor_weighs_the_95th_percentile_of_its_window() -> None:
    assert monitor_summary([0.6] * 30) == pytest.approx(0.6)
    burst = [0.5] * 28 + [1.0] * 2
    a = 2 / 31
    ema = 1 - (1 - a) ** 2 * 0.5
    expected = 0.2 * (16 / 30) + 0.2 * 0.5 + 0.3 * 0.775 + 0.1 * 0.5 + 0.2 * ema
    assert monitor_summary(burst) == pytest.approx(expected)
    # A GPU whose window's mean SM activity is under CARMA's 0.80 but bursts to 1.0: busy to CARMA's monitor.
    window = tuple((sm, 0.5, 0.0) for sm in [0.7] * 22 + [1.0] * 8)
    mean = sum(w[0] for w in window) / 30
    assert mean < 0.80
    resident = (Resident("r", R26, 4000.0, 2.0, 4000.0),)
    gpu = GpuView("g", GPU.memory_mib, "mps", resident, 5000.0, mean, 0.5, 0.0, 0.0, shown_s=0.0)
    job = QueuedJob("j", R26.workload, R26, 1000.0, 2.0, 0.0)
    assert CarmaPolicy.qualifies(gpu, job, 100.0)  # by the means alone
    assert not CarmaPolicy.qualifies(replace(gpu, window=window), job, 100.0)


def test_gpumemnets_errors_reproduce_its_published_bin_confusion() -> None:
    draws = Counter(gpumemnet_offset(f"model{i}", seed) for i in range(2000) for seed in range(10))
    total = sum(GPUMEMNET_CONFUSION.values())
    for offset, count in GPUMEMNET_CONFUSION.items():  # 4 of 11 right, 2 one bin under, 5 one bin over
        assert draws[offset] / 20_000 == pytest.approx(count / total, abs=0.015)
    assert gpumemnet_offset("m", 1) == gpumemnet_offset("m", 1)  # the same model errs the same way
    policy = CarmaPolicy(QueueConfig(policy="carma", carma_seed=4), GPU, PREDICTOR)
    for key in CATALOG:
        profile = catalog_profile(key, GPU)
        job = QueuedJob("j", key, profile, profile.job_mem_mib or 0.0, 2.0, 0.0)
        offset = gpumemnet_offset(key, 4)
        assert policy.estimated(job).mem_estimate_mib == gpumemnet_mib(profile.job_mem_mib or 0.0, offset)


def test_carma_recovers_an_oom_once_on_an_idle_gpu(tmp_path: Path) -> None:
    # On a 40 GB A100 (a DGX Station's), ResNet-152 (19,136 MiB true at seed 15) put one 8 GiB bin under by
    # GPUMemNet (carma seed 13): CARMA packs it beside 4 EfficientNets (5,897 MiB each; 17.3 GB free, so its
    # 8 GiB + 2 GiB fit); it runs out; it is re-run once, alone on the GPU once they ended, and ends.
    assert gpumemnet_offset("resnet152/imagenet", 13) == -1
    effnets = [
        TraceJob(f"e{i}", 0.0, "timm", "efficientnetv2_s", "imagenet64", None, None, 1_000_000, 10.0) for i in range(4)
    ]
    r152 = TraceJob("r152", 0.0, "timm", "resnet152", "imagenet", None, None, 100_000, 10.0)
    trace = write_trace(tmp_path / "mix.csv", [*effnets, r152])
    words = ["cluster=local", "cluster.gpu_model=A100-SXM4-40GB", "cluster.num_gpus=1", "queue.policy=carma"]
    settings = compose_settings(
        [*words, "queue.carma_seed=13", "seed=15", "queue.sim_mem_error=0.5", f"out_dir={tmp_path}"]
    )
    out = replay(trace, settings)
    rows = pd.read_parquet(out.jobs_file).set_index("job_id")
    assert out.summary.complete and out.summary.ooms == int(rows["ooms"].sum()) == 1 and rows.loc["r152", "ooms"] == 1
    others = rows.drop(index="r152")
    start = rows.loc["r152", "start_s"]
    assert not ((others["start_s"] <= start) & (others["end_s"] > start)).any()  # re-run on an idle GPU


@dataclass(frozen=True)
class _Row:
    t: float
    gpu: str
    sm_active: float


def test_the_summary_reports_sm_activity_over_the_makespan(tmp_path: Path) -> None:
    rows = [_Row(0.0, "a", 1.0), _Row(0.0, "b", 0.0), _Row(50.0, "a", 0.0), _Row(50.0, "b", 0.5)]
    sm = sm_activity(rows, 0.0, 100.0, parts=4)
    assert sm is not None and sm.mean == pytest.approx(0.375)
    assert sm.series == pytest.approx((0.5, 0.5, 0.25, 0.25)) and sm.p10 == 0.25 and sm.p90 == 0.5
    assert sm_activity(rows, 10.0, 10.0) is None
    trace = write_trace(tmp_path / "t.csv", generate(12, 0, QueueConfig(), GPU))
    summaries = []
    for policy in ("exclusive", "carma"):
        words = ["cluster=local", "cluster.num_gpus=2", f"queue.policy={policy}", f"out_dir={tmp_path}"]
        settings = compose_settings(words)
        summary = replay(trace, settings).summary
        assert summary.energy_j is not None and summary.energy_j > 0 and summary.ooms >= 0
        assert summary.sm_active_mean is not None and 0 < summary.sm_active_mean <= 1
        assert summary.sm_active_p10 is not None and summary.sm_active_p90 is not None
        assert 0 <= summary.sm_active_p10 <= summary.sm_active_p90 <= 1 and len(summary.sm_series) == 10
        assert statistics.mean(summary.sm_series) == pytest.approx(summary.sm_active_mean)
        summaries.append(summary)
    assert "SM mean" in format_policies(summaries).splitlines()[0]
