"""MPS past saturation as a workload's own probe measured it (``model.calibrate_mps``): the mechanics.
How well it predicts is graded on the corpus (tests/test_advise_corpus.py), never here."""

from __future__ import annotations

import dataclasses
import math

import pytest

from raycolloc.advise.advice import format_advice
from raycolloc.advise.measure import Probes
from raycolloc.advise.model import (
    PAST_LIMIT,
    PAST_MIN_LOAD,
    Candidate,
    Params,
    Slot,
    baseline_share,
    calibrate_mps,
    predict,
)
from tests.test_advise import H200, profile
from tests.test_advise_many import TRUTH

# A small model: 20% of the SMs alone, so MPS saturates near x5 (TRUTH's capacity 0.9).
SMALL = profile("small", sm=0.2, dram=0.0)


def _agg(p: object, degree: int, params: Params = TRUTH) -> float:
    c = Candidate("mps", (p,) * degree, (Slot(),) * degree)  # type: ignore[arg-type]
    agg = predict(c, H200, params).agg_samples_per_s
    assert agg is not None
    return agg


@pytest.mark.parametrize("factor", [0.85, 1.0, 1.2])
def test_the_calibrated_model_meets_the_probe_and_leaves_what_is_below_saturation(factor: float) -> None:
    measured = _agg(SMALL, 16) * factor
    cal = calibrate_mps(SMALL, 16, measured, H200, TRUTH)
    assert cal.mps_probe == (16, measured) and cal.mps_past is not None
    assert math.copysign(1.0, cal.mps_past) == math.copysign(1.0, factor - 1.0) or factor == 1.0
    assert _agg(cal, 16) == pytest.approx(measured, rel=1e-9)
    # Below saturation (x2, x3: 40-60% of the SMs offered) nothing moves; past it the course bends
    # towards the probe, by less at x7 than at x14.
    for d in (2, 3):
        assert _agg(cal, d) == pytest.approx(_agg(SMALL, d), rel=1e-12)
    if factor != 1.0:
        moved = [abs(_agg(cal, d) / _agg(SMALL, d) - 1.0) for d in (7, 14, 16)]
        assert 0 < moved[0] < moved[1] < moved[2]
    # An MPS thread limit is its own ceiling (no probe measured that course): not touched either.
    limited = Candidate("mps", (cal,) * 7, (Slot(sm_fraction=1 / 7),) * 7, active_thread_percentage=(14,) * 7)
    assert predict(limited, H200, TRUTH).agg_samples_per_s == pytest.approx(
        predict(dataclasses.replace(limited, jobs=(SMALL,) * 7), H200, TRUTH).agg_samples_per_s
    )
    # Naive cells are not touched: the calibration is of MPS's concurrent kernels.
    naive = Candidate("naive", (cal,) * 7, (Slot(),) * 7)
    assert predict(naive, H200, TRUTH).agg_samples_per_s == pytest.approx(
        predict(dataclasses.replace(naive, jobs=(SMALL,) * 7), H200, TRUTH).agg_samples_per_s
    )


def test_a_probe_short_of_saturation_calibrates_nothing_and_the_exponent_is_bounded() -> None:
    # x4 offers 0.8 of the SMs: not past PAST_MIN_LOAD times what they serve.
    near = calibrate_mps(SMALL, 4, 2 * _agg(SMALL, 4), H200, TRUTH)
    assert near.mps_past is None and near.mps_probe is None
    assert PAST_MIN_LOAD > 1.0
    wild = calibrate_mps(SMALL, 16, 1000 * _agg(SMALL, 16), H200, TRUTH)
    assert wild.mps_past == PAST_LIMIT
    assert calibrate_mps(SMALL, 16, 0.0, H200, TRUTH).mps_past is None  # nothing measured
    assert calibrate_mps(SMALL, 1, 9_999.0, H200, TRUTH).mps_past is None  # alone: no company to calibrate


def test_near_the_probe_the_solos_noise_barely_moves_the_prediction() -> None:
    """A probe's measurement stands whatever the solo's rate: the calibration is made again when the
    solo is taken faster or slower, so at the probe's degree the prediction carries none of its error."""
    cal = calibrate_mps(SMALL, 16, 0.8 * _agg(SMALL, 16), H200, TRUTH)
    at_probe = Candidate("mps", (cal,) * 16, (Slot(),) * 16)
    assert baseline_share(at_probe, H200, TRUTH) == pytest.approx(0.0, abs=1e-6)
    below = Candidate("mps", (cal,) * 2, (Slot(),) * 2)
    assert baseline_share(below, H200, TRUTH) == pytest.approx(1.0, abs=0.05)


def test_probes_keep_the_calibration_out_of_a_fit_that_covers_its_degree() -> None:
    probes = Probes(
        frozenset({"/p/naive-x8", "/p/mps-x16"}),
        frozenset({"small naive x8", "small mps x16"}),
        {"small": (16, 12_345.0, "/p/mps-x16")},
    )
    assert probes.calibration() == {"small": (16, 12_345.0)}
    assert probes.fitted({"naive": 16, "mps": 16}) == {"/p/naive-x8"}  # the corpus covers x16: calibration alone
    assert probes.fitted({"naive": 16, "mps": 7}) == probes.dirs  # beyond the fit's reach: fitted on too
    assert probes.fitted(None) == probes.dirs  # probe_degrees given: every probe is fitted on, as before


def test_the_advice_prints_the_calibration_it_made() -> None:
    from raycolloc.advise.advice import Advice

    cal = calibrate_mps(SMALL, 16, 0.8 * _agg(SMALL, 16), H200, TRUTH)
    text = format_advice(Advice(gpu=H200, params=TRUTH, profiles=(cal,), not_profiled={}, rankings=(), fit_sweeps=()))
    assert f"past MPS saturation as its mps x16 probe measured ({0.8 * _agg(SMALL, 16):,.0f} samples/s)" in text
    assert f"exponent {cal.mps_past:+.2f}" in text


def test_the_validations_probes_are_each_workloads_and_settings_own() -> None:
    """One workload at two batch sizes: each setting's largest MPS degree is its own probe, and a profile
    is calibrated by its own setting's probe, never by the other's."""
    from raycolloc.advise.observe import Observation
    from raycolloc.advise.validate_probes import mps_probes, probe_of, with_probes

    small64 = dataclasses.replace(SMALL, settings="batch_size=64")

    def obs(p: object, degree: int, rate: float) -> Observation:
        c = Candidate("mps", (p,) * degree, (Slot(),) * degree)  # type: ignore[arg-type]
        return Observation(
            "s",
            f"c{degree}{rate}",
            c.label,
            "ok",
            c,
            H200,
            (rate / degree,) * degree,
            rate,
            None,
            None,
            None,
            None,
            False,
        )

    seen = [obs(SMALL, 7, 40_000.0), obs(SMALL, 16, 50_000.0), obs(small64, 14, 30_000.0), obs(small64, 7, 29_000.0)]
    probes = mps_probes(seen)
    assert probes == {
        ("small", SMALL.settings, H200.name): (16, 50_000.0),
        ("small", "batch_size=64", H200.name): (14, 30_000.0),
    }
    assert [probe_of(o, probes) for o in seen] == [False, True, True, False]
    cache: dict[tuple[object, ...], object] = {}
    (p128,) = set(with_probes(seen[0], probes, TRUTH, cache).candidate.jobs)  # type: ignore[arg-type]
    (p64,) = set(with_probes(seen[3], probes, TRUTH, cache).candidate.jobs)  # type: ignore[arg-type]
    assert p128.mps_probe == (16, 50_000.0) and p64.mps_probe == (14, 30_000.0)
