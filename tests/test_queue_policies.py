"""The queue's placement policies (issue 33): exclusive never co-locates; carma follows CARMA's published
thresholds; raycolloc keeps every job within its slowdown bound on the simulated cluster and beats
exclusive's makespan; an OOM is re-queued and counted; aging stops overtaking."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from raycolloc.config_groups import QUEUE_POLICIES, QueueConfig
from raycolloc.queue.catalog import catalog_profile, sim_gpu, sim_params
from raycolloc.queue.policies import CARMA_MARGIN_MIB, CarmaPolicy, create_policy
from raycolloc.queue.policy import POLICIES, GpuView, Predictor, QueuedJob, Resident
from raycolloc.queue.replay import ReplayOutcome, replay
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.state import Store
from raycolloc.queue.trace import TraceJob, write_trace
from raycolloc.queue.tracegen import generate
from raycolloc.queue.truth import true_memory_factor

GPU = sim_gpu("H100-80GB")
PREDICTOR = Predictor(GPU, sim_params(GPU))
R50 = catalog_profile("resnet50/imagenet64", GPU)


def _queued(job_id: str, est: float = 4000.0, waited: float = 0.0, bound: float = 2.0) -> QueuedJob:
    return QueuedJob(job_id, R50.workload, R50, est, bound, waited)


def _gpu(gpu_id: str, used: float = 0.0, sm: float = 0.0, occ: float = 0.0, dram: float = 0.0) -> GpuView:
    residents = (Resident("r", R50, 4000.0, 2.0),) if used else ()
    return GpuView(gpu_id, GPU.memory_mib, "mps" if used else None, residents, used, sm, occ, dram, None)


def test_the_registry_holds_the_policies_the_config_allows() -> None:
    create_policy(QueueConfig(policy="exclusive"), GPU, PREDICTOR)
    assert set(POLICIES) == set(QUEUE_POLICIES)
    for name in QUEUE_POLICIES:
        assert create_policy(QueueConfig(policy=name), GPU, PREDICTOR).name == name


def test_carma_qualifies_a_gpu_by_its_published_thresholds() -> None:
    job = _queued("j", est=4000.0)
    edge = GPU.memory_mib - 4000.0 - CARMA_MARGIN_MIB  # free memory exactly the estimate + 2 GiB
    assert CarmaPolicy.qualifies(_gpu("g", used=edge), job, 100.0)
    assert not CarmaPolicy.qualifies(_gpu("g", used=edge + 1), job, 100.0)
    for sm, occ, dram, ok in [
        (0.80, 0.45, 0.0, False),  # SM activity and occupancy at their thresholds: skipped
        (0.80, 0.0, 0.40, False),  # SM activity and DRAM activity: skipped
        (0.79, 0.90, 0.90, True),  # SM activity below 0.80: whatever the rest
        (0.95, 0.44, 0.39, True),  # busy SMs, but neither occupancy nor DRAM at its threshold
    ]:
        assert CarmaPolicy.qualifies(_gpu("g", used=1000.0, sm=sm, occ=occ, dram=dram), job, 100.0) is ok
    assert not CarmaPolicy.qualifies(replace(_gpu("g", used=1000.0), last_placed_s=95.0), job, 100.0)
    assert CarmaPolicy.qualifies(_gpu("g"), _queued("big", est=1e9), 100.0)  # an empty GPU takes any job


def test_carma_is_fifo_and_picks_the_gpu_with_the_most_free_memory() -> None:
    policy = create_policy(QueueConfig(policy="carma"), GPU, PREDICTOR)
    gpus = [_gpu("a", used=30_000.0), _gpu("b", used=10_000.0), _gpu("c", used=20_000.0, sm=0.9, occ=0.5)]
    decision = policy.place([_queued("j1"), _queued("j2")], gpus, 100.0)
    # j1 to b (most free of those that qualify; c is busy); b then settles, so j2 goes to a.
    assert [(p.job_id, p.gpu_id, p.mode) for p in decision.placements] == [("j1", "b", "mps"), ("j2", "a", "mps")]
    blocked = policy.place([_queued("huge", est=70_000.0), _queued("small")], gpus, 100.0)
    assert blocked.placements == () and blocked.retry_at == 105.0  # the head blocks the queue, asks again


def test_raycolloc_places_only_within_memory_and_every_bound() -> None:
    policy = create_policy(QueueConfig(policy="raycolloc"), GPU, PREDICTOR)
    full = replace(_gpu("g", used=1.0), residents=(Resident("r", R50, 74_000.0, 2.0),))
    assert policy.place([_queued("j")], [full], 0.0).placements == ()  # its memory would not fit
    strict = replace(_gpu("g", used=1.0), residents=(Resident("r", R50, 4000.0, 1.01),))
    assert policy.place([_queued("j")], [strict], 0.0).placements == ()  # the resident's bound would break
    loose = replace(_gpu("g", used=1.0), residents=(Resident("r", R50, 4000.0, 3.0),))
    (placed,) = policy.place([_queued("j", bound=3.0)], [loose], 0.0).placements
    assert (placed.gpu_id, placed.mode) == ("g", "mps")
    # An empty GPU adds a whole job: it is preferred to a shared one.
    (spread,) = policy.place([_queued("j", bound=3.0)], [loose, _gpu("e")], 0.0).placements
    assert spread.gpu_id == "e"


def _replay(trace: Path, out: Path, policy: str, *extra: str) -> ReplayOutcome:
    words = ["cluster=local", "cluster.num_gpus=4", f"queue.policy={policy}", f"out_dir={out}", *extra]
    return replay(trace, compose_settings(words))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = compose_settings(["cluster=local", "cluster.num_gpus=4"])
    return write_trace(
        tmp_path_factory.mktemp("trace") / "t.csv", generate(40, 11, settings.config.queue, settings.gpu)
    )


def _overlaps(rows: pd.DataFrame) -> int:
    """Pairs of jobs that ran on one GPU at the same time."""
    found = 0
    for _, group in rows.groupby("gpu"):
        spans = sorted(zip(group["start_s"], group["end_s"], strict=True))
        found += sum(1 for (_, end), (start, _) in zip(spans, spans[1:], strict=False) if start < end - 1e-9)
    return found


def test_on_the_simulated_cluster_raycolloc_keeps_every_bound_and_beats_exclusive(tmp_path: Path, trace: Path) -> None:
    runs = {p: _replay(trace, tmp_path, p) for p in QUEUE_POLICIES}
    rows = {p: pd.read_parquet(r.jobs_file) for p, r in runs.items()}
    assert all(r.summary.complete and r.summary.ended == 40 for r in runs.values())
    # exclusive never co-locates
    assert _overlaps(rows["exclusive"]) == 0 and (rows["exclusive"]["co_residents"] == "").all()
    assert runs["exclusive"].summary.max_slowdown == pytest.approx(1.0)
    # raycolloc co-locates, within every job's bound, and ends sooner
    ours = rows["raycolloc"]
    assert _overlaps(ours) > 0 and (ours["slowdown"] <= ours["max_slowdown"] * (1 + 1e-6)).all()
    assert runs["raycolloc"].summary.over_bound == 0
    assert runs["raycolloc"].summary.makespan_s < runs["exclusive"].summary.makespan_s
    assert runs["raycolloc"].summary.energy_j < runs["exclusive"].summary.energy_j
    columns = {"submit_s", "start_s", "end_s", "jct_s", "queue_delay_s", "slowdown", "gpu", "co_residents", "ooms"}
    assert columns <= set(ours.columns) and (ours["jct_s"] >= ours["run_s"]).all()


def test_an_oom_is_requeued_with_a_larger_estimate_and_counted(tmp_path: Path) -> None:
    # Large jobs arriving at once whose true memory is 1.41x their estimate (seed 2): packed by their
    # estimates in one pass, some run out.
    assert true_memory_factor("vit_base_patch16_224/imagenet", 2, 0.9) > 1.4
    jobs = [
        TraceJob(f"v{i}", 0.0, "timm", "vit_base_patch16_224", "imagenet", None, None, 20_000, 10.0) for i in range(8)
    ]
    trace = write_trace(tmp_path / "vit.csv", jobs)
    # min_gain=0: pack them past the point where one more adds little (this is about memory, not gain).
    words = ("cluster.num_gpus=1", "queue.sim_mem_error=0.9", "seed=2", "queue.min_gain=0")
    out = _replay(trace, tmp_path, "raycolloc", *words)
    assert out.summary.complete and out.summary.ooms > 0
    store = Store(out.directory / "queue.sqlite")
    ooms = store.events("oom")
    assert len(ooms) == out.summary.ooms and len(store.events("ended")) == 8
    grown = [r for r in store.jobs() if r.ooms]
    assert grown and all((r.mem_estimate_mib or 0) > 18_000 for r in grown) and all(r.requeues >= r.ooms for r in grown)
    # Once jobs of the workload ran, their measured memory is what counts: the OOMs stop.
    assert max(t for t, _, _, _ in ooms) < min(t for t, _, _, _ in store.events("ended"))
    store.close()


def test_aging_stops_later_jobs_overtaking(tmp_path: Path, trace: Path) -> None:
    def order(aging: str) -> list[str]:
        rows = pd.read_parquet(_replay(trace, tmp_path / aging, "raycolloc", f"queue.aging_s={aging}").jobs_file)
        return list(rows.sort_values(["first_start_s", "submit_s"])["job_id"])

    arrival = sorted(order("0"))  # job ids are in order of arrival
    assert order("0") == arrival  # waited >= 0 s: every head is aged, nothing overtakes it
    assert order("100000") != arrival  # never aged: later jobs backfill past one that does not fit


@pytest.mark.slow  # the benchmark script in a process of its own: ~6 CPU-seconds
def test_the_queue_benchmark_runs_the_three_policies_and_writes_its_table_and_json(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    args = ["--jobs", "24", "--nodes", "1", "--gpus-per-node", "4", "--work-dir", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "jobs/bench_queue_sim.py", *args],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["policies"]) == set(QUEUE_POLICIES)
    for summary in result["policies"].values():
        assert summary["complete"] and summary["jobs"] == 24 and summary["command_wall_s"] > 0
    assert "makespan s" in proc.stdout and "raycolloc" in proc.stdout
