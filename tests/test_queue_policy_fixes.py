"""The queue's policies after review (issue 33, items 6 and 10): the ``raycolloc`` policy never sizes a
job re-queued after an OOM below its grown estimate; ``carma`` follows CARMA's rules (activity check on
every GPU, a recovered job only on an idle GPU, no grown estimate, GPUMemNet's 8 GiB bins, CARMA's
30 s settle)."""

from __future__ import annotations

from raycolloc.config_groups import QueueConfig
from raycolloc.queue.advised import AdvisedPolicy
from raycolloc.queue.catalog import catalog_profile, sim_gpu, sim_params
from raycolloc.queue.policy import GpuView, Predictor, QueuedJob, Resident

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
