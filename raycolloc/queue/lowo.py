"""The advisor's model as a queue meets unseen workloads: fitted without the workloads it predicts.

Under ``queue.truth=corpus`` the ``raycolloc`` policy must not place by a model that has seen the
measurements that play the GPUs. Each job's predicted slowdown (beside whatever shares its GPU) takes
parameters fitted by the advisor's own fit (:func:`raycolloc.advise.fit.fit`) on the corpus's cells
without the job's own workload: every cell holding it is left out, mixes included
(leave-one-workload-out). Its co-residents' workloads may be in that fit, as measured workloads a
queue has seen are. One fit takes about 8 s on one core (the advisor's grid over 115 cells); the fits
are kept per process and corpus, so a process that replays many traces fits each workload once.

What the fit sees of a cell is what the corpus's first cut kept: each job's epoch-2 rate, the cell's
SM activity and power, and each workload's profile alone from its naive degree-1 cells
(:mod:`raycolloc.queue.corpus`): rate, SM activity, time busy as NVML's utilisation, memory — no SM
occupancy or DRAM activity (no GPM samples were kept), so the model's DRAM term and MPS's many-clients
loss (which needs DRAM activity) do not act, and no CPU term (no cores recorded). The profiles alone
of the workloads predicted are theirs (a user's queue profiles a workload alone before placing it,
as the advisor does); their collocated cells never enter the fit. A power slope the fit cannot find
is the simulated GPU's.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from raycolloc.advise.fit import fit
from raycolloc.advise.model import Gpu, Params
from raycolloc.queue.corpus import Corpus
from raycolloc.queue.policy import Predictor

__all__ = ["LeaveOutPredictor"]

log = logging.getLogger(__name__)

_FITTED: dict[tuple[Path, str], Params] = {}  # (corpus, workload left out) -> parameters, per process


class LeaveOutPredictor(Predictor):
    """The advisor's model with parameters fitted on the corpus without the workloads predicted."""

    def __init__(self, gpu: Gpu, corpus: Corpus, fallback: Params) -> None:
        super().__init__(gpu, fallback)
        self.corpus = corpus

    def params_for(self, workload: str) -> Params:
        key = (self.corpus.path, workload)
        if key not in _FITTED:
            found = fit(list(self.corpus.observations), exclude=frozenset({workload}))
            if found.power_slope_w is None:
                found = dataclasses.replace(found, power_slope_w=self.params.power_slope_w)
            log.info("queue: the model without %s: %s", workload, found.source)
            _FITTED[key] = found
        return _FITTED[key]
