"""The queue's policies after review (issue 33, items 6 and 10): the ``raycolloc`` policy never sizes a
job re-queued after an OOM below its grown estimate; ``carma`` follows CARMA's rules (activity check on
every GPU, a recovered job only on an idle GPU, no grown estimate, GPUMemNet's 8 GiB bins, CARMA's
30 s settle); ``queue.policy`` is checked against the policy registry (item 9)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from raycolloc.advise.profile import Profile
from raycolloc.config_checks import ConfigError
from raycolloc.config_groups import QueueConfig, queue_policies
from raycolloc.queue.__main__ import main
from raycolloc.queue.advised import AdvisedPolicy
from raycolloc.queue.catalog import catalog_profile, sim_gpu, sim_params
from raycolloc.queue.policies import (
    CARMA_MARGIN_MIB,
    RETRY_S,
    SETTLE_S,
    CarmaPolicy,
    ExclusivePolicy,
    create_policy,
    gpumemnet_mib,
)
from raycolloc.queue.policy import (
    POLICIES,
    GpuView,
    Predictor,
    QueuedJob,
    Resident,
    register_policy,
    unregister_policy,
)

GPU = sim_gpu("H100-80GB")
PREDICTOR = Predictor(GPU, sim_params(GPU))
R50 = catalog_profile("resnet50/imagenet64", GPU)
R26 = catalog_profile("resnet26/cifar10", GPU)


def _view(gpu_id: str, *residents: Resident) -> GpuView:
    used = sum(r.mem_used_mib or r.mem_estimate_mib for r in residents)
    return GpuView(gpu_id, GPU.memory_mib, "mps" if residents else None, residents, used, 0.0, 0.0, 0.0, None)


def test_raycolloc_never_sizes_a_requeued_job_below_its_grown_estimate() -> None:
    policy = AdvisedPolicy(QueueConfig(policy="raycolloc"), GPU, PREDICTOR)
    # A job of resnet50 was seen using 4 GB elsewhere; this one ran out and was re-queued at 30 GB.
    seen = _view("s", Resident("other", R50, 4_000.0, 10.0, mem_used_mib=4_000.0))
    busy = _view("g", Resident("big", R26, 52_000.0, 10.0, mem_used_mib=52_000.0))
    grown = QueuedJob("j", R50.workload, R50, 30_000.0, 10.0, 0.0)
    decision = policy.place([grown], [seen, busy], 0.0)
    # 52 GB + 30 GB and the margins do not fit on 80 GB: not placed beside "big" (4 GB would have).
    assert all(p.gpu_id != "g" for p in decision.placements)
    assert policy.newcomer_mib(grown) == 30_000.0  # max(seen 4 GB, grown 30 GB)
    small = QueuedJob("k", R50.workload, R50, 1_000.0, 10.0, 0.0)
    assert policy.newcomer_mib(small) == 4_000.0  # what was seen still counts when larger


def _carma_gpu(
    gpu_id: str, used: float = 0.0, sm: float = 0.0, occ: float = 0.0, placed: float | None = None
) -> GpuView:
    residents = (Resident("r", R26, used, 10.0, mem_used_mib=used),) if used else ()
    return GpuView(gpu_id, GPU.memory_mib, "mps" if used else None, residents, used, sm, occ, 0.0, placed)


def _job(job_id: str, est: float = 4_000.0, ooms: int = 0) -> QueuedJob:
    return QueuedJob(job_id, R50.workload, R50, est, 10.0, 0.0, ooms)  # R50's profile: 4,000 MiB


def test_carma_checks_activity_on_every_gpu_an_empty_one_included() -> None:
    policy = create_policy(QueueConfig(policy="carma"), GPU, PREDICTOR)
    busy_empty = _carma_gpu("e", sm=0.9, occ=0.5)  # its window still shows the jobs that just left
    assert not CarmaPolicy.qualifies(busy_empty, _job("j"), 100.0)
    decision = policy.place([_job("j")], [busy_empty], 100.0)
    assert decision.placements == () and decision.retry_at == 100.0 + RETRY_S  # asks again: the window moves
    assert CarmaPolicy.qualifies(replace(busy_empty, sm_active=0.0), _job("big", est=1e9), 100.0)


def _bins() -> CarmaPolicy:
    """CARMA with an estimator that is always in the right bin (GPUMemNet's errors are tested apart)."""
    return CarmaPolicy(QueueConfig(policy="carma", carma_estimator="bins"), GPU, PREDICTOR)


def test_carma_estimates_in_gpumemnets_8_gib_bins() -> None:
    assert [gpumemnet_mib(m) for m in (1.0, 8192.0, 8193.0, 20_000.0)] == [8192.0, 8192.0, 16384.0, 24576.0]
    assert _bins().estimated(_job("j")).mem_estimate_mib == 8192.0
    policy = _bins()
    # Free memory enough for the profile's 4,000 MiB + 2 GiB, not for its 8 GiB bin + 2 GiB.
    tight = _carma_gpu("t", used=GPU.memory_mib - 4_000.0 - CARMA_MARGIN_MIB - 100.0)
    assert policy.place([_job("j")], [tight], 100.0).placements == ()
    roomy = _carma_gpu("r", used=GPU.memory_mib - 8192.0 - CARMA_MARGIN_MIB)
    assert [p.gpu_id for p in policy.place([_job("j")], [roomy], 100.0).placements] == ["r"]


def test_carma_requeues_after_an_oom_with_its_estimate_unchanged_onto_an_idle_gpu_only() -> None:
    policy = _bins()
    grown = _job("oom", est=30_000.0)  # the queue grew it after the OOM; CARMA does not
    assert policy.estimated(grown).mem_estimate_mib == 8192.0
    shared = _carma_gpu("s", used=10_000.0)  # 71 GB free, qualifies for a fresh job
    for recovered in (grown, _job("oom2", ooms=1)):
        blocked = policy.place([recovered, _job("fresh")], [shared], 100.0)
        assert blocked.placements == ()  # the recovered head waits for an idle GPU, and blocks the queue
        placed = policy.place([recovered, _job("fresh")], [shared, _carma_gpu("e")], 100.0).placements
        assert [(p.job_id, p.gpu_id) for p in placed] == [(recovered.job_id, "e"), ("fresh", "s")]


def test_carma_leaves_a_gpu_alone_for_its_30_s_settle_time() -> None:
    assert SETTLE_S == 30.0  # CARMA's grace after a job shows on a GPU
    gpu = _carma_gpu("g", used=10_000.0)
    assert not CarmaPolicy.qualifies(replace(gpu, last_placed_s=80.0), _job("j"), 100.0)  # 20 s ago
    assert CarmaPolicy.qualifies(replace(gpu, last_placed_s=69.0), _job("j"), 100.0)  # 31 s ago


def test_queue_policy_is_checked_against_the_policy_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=r"queue.policy='mine' is not allowed; choose one of: exclusive, carma"):
        QueueConfig(policy="mine")

    @register_policy("mine")
    class Mine(ExclusivePolicy):
        name = "mine"

    try:
        assert "mine" in queue_policies()
        assert create_policy(QueueConfig(policy="mine"), GPU, PREDICTOR).name == "mine"  # a new plugin: accepted
        assert main(["trace", "--jobs", "3", "--out", str(tmp_path / "t.csv"), "queue.policy=nope"]) == 2
        err = capsys.readouterr().err
        assert "queue.policy='nope' is not allowed; choose one of: exclusive, carma, raycolloc, mine" in err
    finally:
        unregister_policy("mine")
    assert "mine" not in queue_policies() and "mine" not in POLICIES
    assert not (tmp_path / "t.csv").exists()


def test_the_queue_tells_a_policy_how_often_a_job_ran_out_of_memory(tmp_path: Path) -> None:
    from raycolloc.queue.core import JobStart, Queue
    from raycolloc.queue.policy import Decision
    from raycolloc.queue.state import Store
    from raycolloc.queue.trace import TraceJob

    seen: list[QueuedJob] = []

    class Recorder:
        name = "recorder"

        def place(self, waiting: Sequence[QueuedJob], gpus: Sequence[GpuView], now: float) -> Decision:
            seen.extend(waiting)
            return Decision(())

    class NoRunners:
        def views(self, now: float) -> list[GpuView]:
            return []

        def start(self, job: JobStart) -> None:
            raise AssertionError("nothing is placed")

        def running(self) -> frozenset[tuple[str, int]]:
            return frozenset()

    store = Store(tmp_path / "q.sqlite")
    store.add([TraceJob("j0", 0.0, "timm", "resnet50", "imagenet64", None, None, 1000, None)], [R50.job_mem_mib], 0.0)
    attempt = store.place("j0", "g0", "naive", 1.0)
    store.start("j0", attempt, 1.0)
    store.oom("j0", attempt, 2.0, R50.job_mem_mib * 1.5)
    queue = Queue(store, Recorder(), NoRunners(), QueueConfig(), GPU, lambda job: R50)
    queue.schedule(3.0)
    store.close()
    assert [(j.job_id, j.ooms) for j in seen] == [("j0", 1)]  # carma's recovery queue reads it (recovered())


VIT = catalog_profile("vit_base_patch16_224/imagenet", GPU)
# Busy 85% alone: a time-sliced pair gains a little (a vit_base pair, busy 95%, now loses the switches:
# the advisor's naive model, checked on the corpus, where vit_tiny and resnet152 pairs gave 0.91-0.93x).
R152 = catalog_profile("resnet152/imagenet", GPU)


def _naive_beside(profile: Profile, bound: float) -> GpuView:
    resident = Resident("r", profile, profile.job_mem_mib or 0.0, bound)
    return GpuView("g", GPU.memory_mib, "naive", (resident,), resident.mem_estimate_mib, 0.0, 0.0, 0.0, None)


def _joins(config: QueueConfig, profile: Profile, bound: float) -> bool:
    policy = AdvisedPolicy(config, GPU, PREDICTOR)
    job = QueuedJob("j", profile.workload, profile, profile.job_mem_mib or 0.0, bound, 0.0)
    return policy.added_gain(job, _naive_beside(profile, bound)) is not None


def test_raycolloc_keeps_its_slowdown_margin_below_each_bound() -> None:
    # Two time-sliced resnet152 jobs: predicted ~1.93x each. A bound 5% above that is met by the point
    # prediction but not with the 10% margin (on H200s a vit_base pair ran 2.2x against a 2.0 bound).
    predicted = PREDICTOR.outlook("naive", [R152, R152]).slowdowns[0]
    bound = predicted * 1.05
    assert not _joins(QueueConfig(slowdown_margin=0.10, min_gain=0.0), R152, bound)
    assert _joins(QueueConfig(slowdown_margin=0.0, min_gain=0.0), R152, bound)
    assert _joins(QueueConfig(slowdown_margin=0.10, min_gain=0.0), R152, predicted * 1.11)


def test_raycolloc_does_not_share_a_gpu_for_a_gain_below_min_gain() -> None:
    # The same pair under a loose bound adds ~4% of a job's work per second: a wash, so it waits.
    gain = 2.0 / PREDICTOR.outlook("naive", [R152, R152]).slowdowns[0] - 1.0
    assert 0.0 < gain < 0.05
    assert not _joins(QueueConfig(min_gain=0.05), R152, 3.0)
    assert _joins(QueueConfig(min_gain=0.0), R152, 3.0)
    assert _joins(QueueConfig(min_gain=0.05), R26, 3.0)  # light jobs still share (+70% naive)


@pytest.mark.parametrize("key", ["slowdown_margin", "min_gain"])
@pytest.mark.parametrize("value", [-0.1, 1.5, "lots", True])
def test_queue_margins_out_of_range_are_refused_by_name(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"queue\.{key}=.* must be a number 0\.\.1"):
        QueueConfig(**{key: value})  # type: ignore[arg-type]


def _first_placed(order: str, *jobs: QueuedJob) -> str:
    """Which of ``jobs`` (waiting in this order) one empty GPU takes (their bound keeps a second off)."""
    policy = AdvisedPolicy(QueueConfig(order=order, aging_s=60.0), GPU, PREDICTOR)
    decision = policy.place(list(jobs), [_view("g")], 0.0)
    assert len(decision.placements) == 1
    return decision.placements[0].job_id


def test_raycolloc_looks_at_the_longest_job_first_unless_told_arrival_or_the_head_has_aged() -> None:
    mem = VIT.job_mem_mib or 0.0
    short = QueuedJob("short", VIT.workload, VIT, mem, 1.2, 10.0, length_s=5.0)  # 1.2: no sharing
    long = QueuedJob("long", VIT.workload, VIT, mem, 1.2, 1.0, length_s=50.0)
    assert _first_placed("longest", short, long) == "long"
    assert _first_placed("arrival", short, long) == "short"
    # A job re-queued after an OOM comes first whatever its length.
    assert _first_placed("longest", replace(short, ooms=1), long) == "short"
    # A head that has waited aging_s is not overtaken.
    assert _first_placed("longest", replace(short, waited_s=60.0), long) == "short"


def test_queue_order_out_of_its_choices_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"queue\.order='biggest'.*longest, arrival"):
        QueueConfig(order="biggest")
    assert main(["trace", "--jobs", "2", "--out", "/dev/null", "queue.order=biggest"]) == 2
    assert "queue.order" in capsys.readouterr().err
