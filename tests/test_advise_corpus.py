"""The advisor graded on measured truth: leave-one-workload-out over the committed corpus (``corpus/``:
real one-H200 cells of nine timm models, naive and MPS at degrees 1-16, and two mixes; one of them,
cait_xxs24, so far only alone and at x16, where it ran out of memory: described, not graded).

Each workload is profiled from what the advisor measures of an unseen model by default -- its own
degree-1 runs and one MPS probe at its largest degree (the calibration of its course past
saturation) -- and its other configurations are predicted with parameters fitted on the other
workloads' cells; the errors are the corpus's, not fixtures made by the model. The corpus is read
with its later pass (``corpus/passes/``): a configuration is graded by the median of its runs on
both days, and its measured interval is over them. The bounds below are the level the model reaches
today (docs/advise.md, "Validated on the corpus"), so a regression fails; the issue's targets
(median 5%, max 12%) are met.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from raycolloc.advise.advice import write_json
from raycolloc.advise.fit import CAPACITY_MAX
from raycolloc.advise.validate import BOTH, TIGHT_REL, Validation, format_validation, validate

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

# The level reached on the corpus with its second pass and each model's MPS probe (median 1.9%, max
# 9.7% over 43 configurations measured within +-5% across both days: resnet50 naive x3), with a
# little room for the grid's ties; tighten them when the model improves. Before the probe (the solo
# alone): median 2.5%, max 15.3% over the same 43; on the first pass alone, 3.1% and 28.2% over 68.
MEDIAN_BOUND = 0.025
MAX_BOUND = 0.105
# The second grading (validate.BOTH: measured within +-5% and predicted from a solo whose interval moves
# the prediction by no more than 5%): median 1.9%, max 9.7% over 39.
BOTH_MEDIAN_BOUND = 0.025
BOTH_MAX_BOUND = 0.105


@pytest.fixture(scope="module")
def graded() -> Validation:
    return validate([CORPUS])


# The corpus validated leave one out (every model's parameters fitted on the others): ~15 CPU-seconds, the
# quick tier's costliest fixture by far; the tests that read it are `slow` (make test runs them).
grades = pytest.mark.slow


def _models() -> set[str]:
    """The workloads the corpus measured collocated and ok, alone in their cells (its mixes' workloads
    are among them): every one of them has configurations to grade."""
    cells = pd.read_parquet(CORPUS / "cells.parquet")
    graded = cells[(cells["degree"] > 1) & (cells["status"] == "ok") & ~cells["entry"].str.startswith("mix")]
    jobs = pd.read_parquet(CORPUS / "jobs.parquet")
    return set(jobs[jobs["cell_id"].isin(graded["cell_id"])]["workload"])


@grades
def test_every_corpus_model_is_graded(graded: Validation) -> None:
    graded_models = {m.name for m in graded.per_workload if m.n > 0}
    assert graded_models == _models()
    assert all(c.measured_rel_hw is not None for c in graded.configurations if c.throughput_error is not None)
    for name, params in graded.params.items():  # leave-one-out: never fitted on itself
        for workload in name.split(" on ")[0].split("+"):
            assert workload not in params.source.split(" (")[0], params.source


@grades
def test_the_throughput_error_holds_the_level_reached(graded: Validation) -> None:
    (median, top) = [m for m in graded.metrics if m.name == f"throughput, measured ±{TIGHT_REL:.0%}"]
    assert median.median_abs is not None and top.max_abs is not None
    print(
        f"corpus LOWO throughput error, {median.n} configurations: "
        f"median {median.median_abs:.1%}, max {top.max_abs:.1%}"
    )
    assert median.n >= 40
    assert median.median_abs is not None and median.median_abs <= MEDIAN_BOUND
    assert top.max_abs is not None and top.max_abs <= MAX_BOUND
    assert median.passed is True and top.passed is True  # the median (5%) and max (12%)


@grades
def test_each_models_mps_probe_is_input_and_the_solo_alone_is_printed_beside(graded: Validation) -> None:
    """A workload's MPS configuration of the largest degree measured is its probe: input, never graded;
    the other configurations are graded with it. The same configurations from the solo alone are
    printed beside (no target), and the probe is what takes the largest error down."""
    # Each model's largest MPS degree measured ok, read from the corpus's tables (both passes).
    tables = [CORPUS, *sorted((CORPUS / "passes").glob("*"))]
    cells = pd.concat([pd.read_parquet(t / "cells.parquet") for t in tables])
    mps = cells[(cells["mode"] == "mps") & (cells["status"] == "ok") & ~cells["entry"].str.startswith("mix")]
    jobs = pd.concat([pd.read_parquet(t / "jobs.parquet") for t in tables]).drop_duplicates("cell_id")
    named = mps.drop(columns=["workload"], errors="ignore").merge(jobs[["cell_id", "workload"]], on="cell_id")
    top = named.groupby("workload")["degree"].max()
    assert len(top) >= 8
    graded_labels = {c.label for c in graded.configurations}
    for model, degree in top.items():
        if degree > 1:
            assert f"{model}-mps-x{degree}" not in graded_labels, model  # the probe is never graded
    probes = {c.label for c in graded.checks if c.profile_cell and "-mps-x" in c.label}
    for model in ("resnet26_cifar10", "mobilenetv3_large_100_cifar10", "vit_tiny_patch16_224_imagenet"):
        assert f"{model}-mps-x16" in probes, sorted(probes)
    assert "resnet152_imagenet-mps-x7" in probes  # its x14 and x16 do not fit: x7 is its largest
    (with_probe,) = [
        m for m in graded.metrics if m.name == f"throughput, measured ±{TIGHT_REL:.0%}" and "max" in m.target
    ]
    (solo_alone,) = [m for m in graded.metrics if m.name == f"throughput, measured ±{TIGHT_REL:.0%}, no probe"]
    assert solo_alone.n == with_probe.n and solo_alone.target == "-"
    assert with_probe.max_abs is not None and solo_alone.max_abs is not None
    assert with_probe.max_abs < 0.12 < solo_alone.max_abs
    assert "no probe" in format_validation(graded)


@grades
def test_the_second_grading_leaves_out_only_what_the_solo_moves(graded: Validation) -> None:
    """Graded apart: the configurations measured within +-5% whose prediction the solo's own interval
    moves by more than 5% (below saturation, small models whose solo runs spread by CV 16-23%)."""
    (median, top) = [m for m in graded.metrics if m.name == BOTH]
    print(f"corpus LOWO, measured and solo ±5%, {median.n}: median {median.median_abs:.1%}, max {top.max_abs:.1%}")
    assert median.median_abs is not None and median.median_abs <= BOTH_MEDIAN_BOUND
    assert top.max_abs is not None and top.max_abs <= BOTH_MAX_BOUND
    assert median.n >= 36
    tight = [c for c in graded.configurations if c.throughput_error is not None and c.tight]
    apart = [c for c in tight if not c.tight_both]
    assert len(apart) == len(tight) - median.n
    for c in apart:  # left out by the solo's interval, carried by a prediction below or near saturation
        assert c.solo_rel_hw is not None and c.solo_rel_hw > TIGHT_REL, c.label
        # (resnet18 mps x7, near saturation, carries 0.24 of a solo whose runs spread by +-18%.)
        assert c.predicted.baseline_share > 0.2, c.label
    # Past saturation the solo's rate barely moves a prediction: what is graded there is the model.
    saturated = [c for c in tight if c.predicted.degree >= 14]
    assert saturated and all(c.tight_both and c.predicted.baseline_share < 0.15 for c in saturated)
    printed = format_validation(graded)
    assert f"{BOTH}" in printed and all(f"  {c.label}: measured" in printed for c in apart)


@grades
def test_mps_serves_what_a_job_fills_alone(graded: Validation) -> None:
    """vit_tiny and resnet152 keep 71% and 82% of the SMs active alone; with one MPS capacity for every
    workload they were predicted 7-11% low at x2-x16; counting the part a job fills alone as served
    (model.sm_capacity), within 8%."""
    for name in ("vit_tiny_patch16_224_imagenet", "resnet152_imagenet"):
        (m,) = [m for m in graded.per_workload if m.name == name]
        assert m.max_abs is not None and m.max_abs <= 0.08, (name, m.max_abs)


@grades
def test_intervals_are_never_negative(graded: Validation) -> None:
    for c in graded.configurations:
        for interval in (c.predicted.agg_interval, c.predicted.slowdown_interval):
            assert interval is None or interval.low > 0, c.label


@grades
def test_memory_is_never_under_predicted(graded: Validation) -> None:
    safe = [c.mem_safe for c in graded.checks if c.mem_safe is not None]
    assert len(safe) >= 100 and all(safe)
    assert graded.unsafe_fits == ()
    # The corpus's unfit cells (resnet152 x14, x16: 17.3 GiB a job) are predicted not to fit.
    refused = [c for c in graded.checks if c.status == "unfit"]
    assert refused and not any(c.predicted.fits for c in refused)


@grades
def test_parameters_stay_what_they_mean(graded: Validation) -> None:
    for params in graded.params.values():
        assert params.naive.capacity <= CAPACITY_MAX and params.mps.capacity <= CAPACITY_MAX
        assert params.unfitted_modes == ("mig",)  # no MIG cell in the corpus


@grades
def test_the_errors_are_printed_and_written(graded: Validation, tmp_path: Path) -> None:
    printed = format_validation(graded)
    for c in graded.configurations:
        assert c.label[:42] in printed
    assert f"throughput, measured ±{TIGHT_REL:.0%}" in printed and "max < 12%" in printed
    assert "under-predicted: 0" in printed and "unfitted (no cell of their own): mig" in printed
    saved = json.loads(write_json(tmp_path / "v.json", graded).read_text())
    assert all(p["unfitted_modes"] == ["mig"] for p in saved["params"].values())
    assert len(saved["per_workload"]) == len(_models())


def test_the_corpus_is_the_default_prior_on_an_h200(tmp_path: Path) -> None:
    """The advisor's default fit reads the corpus beside an empty out_dir (issue 44's cheaper advice):
    other workloads' cells up to x16 in both modes, so the solo runs once and the one probe is MPS at the
    largest degree (its course past saturation is the workload's own)."""
    import dataclasses

    from raycolloc.advise.advice import measured
    from raycolloc.advise.corpus import CORPUS_DIR
    from raycolloc.advise.measure import fitted_reach, prior_covers, probe_words
    from raycolloc.advise.model import Gpu
    from raycolloc.advise.run import parse_request
    from tests.test_advise_confirm import _profiled

    assert CORPUS_DIR == CORPUS
    found = measured([tmp_path, CORPUS_DIR], frozenset({"resnet26_cifar10"}), "NVIDIA H200", 16)
    assert "resnet26_cifar10" not in found.params.source.split(" (")[0]  # the advised workload left out
    assert fitted_reach(found.params) == {"naive": 16, "mps": 16}
    solo = found.profiles[next(k for k in found.profiles if k[1] == "resnet26_cifar10")]
    h200 = Gpu("NVIDIA H200", 143771.0, base_mib=600.0, cores=16)
    assert prior_covers(found.params, h200)(solo)
    profiled = [_profiled(solo)]
    request = parse_request(["workload=resnet26_cifar10"], (1, 2, 3, 7))
    # One probe: MPS at the largest degree ranked, the calibration past saturation (the corpus covers the rest).
    assert [label for label, _ in probe_words(profiled, request, h200, fitted_reach(found.params))] == [
        "resnet26_cifar10 mps x16"
    ]
    # Another GPU model finds nothing of the corpus to fit on: the defaults, and every probe.
    other = measured([tmp_path, CORPUS_DIR], frozenset(), "NVIDIA A100", 16)
    assert fitted_reach(other.params) == {"naive": 0, "mps": 0}
    assert probe_words(profiled, request, dataclasses.replace(h200, name="NVIDIA A100"), {"naive": 0, "mps": 0})


@grades
def test_the_confirmation_rules_out_only_what_cannot_be_the_best(graded: Validation) -> None:
    """What the advisor confirms (the contenders, in the halving's order, its default two) holds, for
    every corpus model predicted leave one out, a configuration measured within 5% of the best measured;
    a configuration left out by its interval measured below the best in every case."""
    from raycolloc.advise.confirm import DEFAULT_K, contenders, plateau_order

    by_model: dict[str, list] = {}
    for c in graded.configurations:
        p = c.predicted
        if c.status == "ok" and c.measured_agg_samples_per_s and p.fits and p.agg_samples_per_s and c.label:
            if p.mode in ("naive", "mps") and "+" not in p.workloads:
                by_model.setdefault(p.workloads, []).append(c)
    assert len(by_model) >= 8
    for model, checks in by_model.items():
        measured = {c.predicted.label: c.measured_agg_samples_per_s for c in checks}
        preds = sorted((c.predicted for c in checks), key=lambda p: -(p.agg_samples_per_s or 0.0))
        kept = contenders(preds)
        confirmed = plateau_order(kept)[:DEFAULT_K]
        best = max(measured.values())
        assert max(measured[p.label] for p in confirmed) >= 0.95 * best, model
        assert all(measured[p.label] < best for p in preds if p not in kept), model


@grades
def test_the_same_fit_asked_again_is_not_fitted_again_until_a_table_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The advice fits on the same cells before its probes and again to rank (2.3 s each on the H200,
    its lane held for the confirmation meanwhile): the second is the first's; a new or rewritten
    table under a fit directory is fitted anew."""
    import shutil

    from raycolloc.advise import advice

    fits = []
    real_fit = advice.fit
    monkeypatch.setattr(advice, "fit", lambda *a, **k: fits.append(1) or real_fit(*a, **k))
    prior = shutil.copytree(CORPUS, tmp_path / "corpus")
    args = ([tmp_path / "out", prior], frozenset({"resnet26_cifar10"}), "NVIDIA H200", 16)
    first = advice.measured(*args)
    assert advice.measured(*args) is first and len(fits) == 1
    assert advice.measured(*args[:3], 8) is not first and len(fits) == 2  # other arguments: another fit
    again = advice.measured(*args)
    assert again is not first and len(fits) == 3 and again.params == first.params
    cells = prior / "cells.parquet"
    pd.read_parquet(cells).head(-1).to_parquet(cells)  # a cell fewer
    assert advice.measured(*args) is not again and len(fits) == 4
