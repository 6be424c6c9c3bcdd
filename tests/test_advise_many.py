"""The advisor past saturation and over repeats: the MPS clients' loss (``mps_thrash``), a
configuration's repeats fitted as one, and a new solo combined with every run measured before."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from raycolloc.advise.confirm import plateau_order, successive_halving
from raycolloc.advise.fit import fit
from raycolloc.advise.model import ModeParams, Params, Prediction, predict
from raycolloc.advise.observe import Observation, by_configuration
from raycolloc.advise.profile import Profile, combine
from raycolloc.advise.rank import uniform_candidates
from raycolloc.advise.run import Profiled
from raycolloc.advise.shapes import DRAM_UNSEEN
from raycolloc.results.stats import Interval
from tests.test_advise import H200, cell, profile

TRUTH = Params(ModeParams(0.9, 6.0), ModeParams(0.9, 4.0), ModeParams(0.9, 4.0), None, "truth")


def _observed(params: Params, p: Profile, mode: str, degree: int, scale: float = 1.0, repeat: int = 0) -> Observation:
    """One cell 'measured' as ``params`` predict it, its rates times ``scale`` (a slow run)."""
    c = cell(mode, p, degree)
    pred = predict(c, H200, params)
    assert pred.agg_samples_per_s is not None
    return Observation(
        sweep="s",
        cell_id=f"{p.workload}-{mode}-{degree}-r{repeat}",
        label=f"{p.workload}-{mode}-x{degree}" + (f"-r{repeat}" if repeat else ""),
        status="ok",
        candidate=c,
        gpu=H200,
        job_samples_per_s=tuple(j.samples_per_s * scale for j in pred.jobs),
        agg_samples_per_s=pred.agg_samples_per_s * scale,
        mem_used_mib=None,
        power_w=None,
        sm_active=pred.sm_active / 100,
        energy_per_sample_j=None,
        profile_cell=False,
        group=f"{p.workload}-{mode}-{degree}",
    )


def test_many_mps_clients_lose_by_their_dram_activity() -> None:
    """Past the SMs' saturation, more MPS clients lower the aggregate in proportion to the jobs' DRAM
    activity; below saturation, with no DRAM activity, or naive, nothing changes."""
    thrash = dataclasses.replace(TRUTH, mps_thrash=0.5)
    heavy, light = profile("heavy", sm=0.2, dram=0.3), profile("light", sm=0.2, dram=0.0)

    def agg(params: Params, p: Profile, mode: str, degree: int) -> float:
        rate = predict(cell(mode, p, degree), H200, params).agg_samples_per_s
        assert rate is not None
        return rate

    assert agg(thrash, heavy, "mps", 3) == pytest.approx(agg(TRUTH, heavy, "mps", 3))  # 0.6 offered < 0.9
    for degree in (14, 28):
        assert agg(thrash, light, "mps", degree) == pytest.approx(agg(TRUTH, light, "mps", degree))
        assert agg(thrash, heavy, "naive", degree) == pytest.approx(agg(TRUTH, heavy, "naive", degree))
    # Alone a job is its profile, even one that saturates the SMs of a low fitted capacity.
    low = dataclasses.replace(thrash, mps=ModeParams(0.6, 4.0))
    big = profile("big", sm=0.85, dram=0.5)
    assert agg(low, big, "mps", 1) == pytest.approx(big.samples_per_s)
    # the SMs' capacity for it 0.2 + 0.8 x 0.9 = 0.92 (model.sm_capacity); offered 28 x 0.2 / 0.92 - 1
    # = 5.087: 1 / (1 + 0.5 x 0.3 x 5.087)
    assert agg(thrash, heavy, "mps", 28) == pytest.approx(
        agg(TRUTH, heavy, "mps", 28) / (1 + 0.5 * 0.3 * (28 * 0.2 / 0.92 - 1)), rel=1e-3
    )
    assert agg(thrash, heavy, "mps", 28) < agg(thrash, heavy, "mps", 14) < agg(TRUTH, heavy, "mps", 14)


def test_an_mps_configuration_past_saturation_beyond_the_fits_dram_activity_is_extrapolated() -> None:
    """The fit learns the many-clients loss from the DRAM activity of the workloads it saw past
    saturation; a workload with over 1.5x that much, past saturation under MPS, is marked extrapolated
    and its interval widened by 1 + log2(its DRAM activity / the reach) (resnet26 at 2.6% fitted on
    models at 0.8% or less on one H200: MPS x14 predicted 29% high). Below saturation, within reach,
    or naive, nothing changes."""
    light, heavy = profile("light", sm=0.2, dram=0.008), profile("heavy", sm=0.2, dram=0.026)
    truth = dataclasses.replace(TRUTH, mps_thrash=1.0)
    obs = [_observed(truth, light, mode, d) for mode in ("naive", "mps") for d in (2, 3, 7, 14)]
    params = fit(obs)
    assert params.mps_dram_reach == pytest.approx(0.008)  # light's MPS x7 and x14 offer 1.4 and 2.8
    assert fit([o for o in obs if o.candidate.degree <= 3]).mps_dram_reach == 0.0  # none past saturation
    unfitted = dataclasses.replace(params, degrees=(("naive", (2, 3, 7, 14, 28)), ("mps", (2, 3, 7, 14, 28))))
    far = predict(cell("mps", heavy, 14), H200, unfitted)
    assert far.extrapolated and far.dram_beyond == pytest.approx(0.026 / 0.008)
    reach = dataclasses.replace(unfitted, mps_dram_reach=0.026)
    near = predict(cell("mps", heavy, 14), H200, reach)
    assert not near.extrapolated and near.dram_beyond == 1.0
    assert far.agg_samples_per_s == pytest.approx(near.agg_samples_per_s)  # a flag and a wider interval
    assert far.agg_interval is not None and near.agg_interval is not None
    widened = (far.agg_interval.high - far.agg_interval.low) / (near.agg_interval.high - near.agg_interval.low)
    assert widened > 1.0 + math.log2(0.026 / 0.008) - 0.3  # the profile's own spread is added in quadrature
    assert not predict(cell("mps", heavy, 3), H200, unfitted).extrapolated  # 0.6 offered: below saturation
    assert not predict(cell("naive", heavy, 14), H200, unfitted).extrapolated
    assert not predict(cell("mps", profile("x", sm=0.2, dram=0.011), 14), H200, unfitted).extrapolated  # < 1.5x
    # A fit with no MPS cell past saturation knows nothing there: past saturation is extrapolated.
    unseen = dataclasses.replace(unfitted, mps_dram_reach=0.0)
    blind = predict(cell("mps", heavy, 14), H200, unseen)
    assert blind.extrapolated and blind.dram_beyond == DRAM_UNSEEN
    assert not predict(cell("mps", heavy, 3), H200, unseen).extrapolated
    # Far beyond the reach, the ratio is capped (the interval stays finite).
    assert predict(cell("mps", profile("y", sm=0.2, dram=0.5), 14), H200, unfitted).dram_beyond == DRAM_UNSEEN


def test_fit_finds_the_many_clients_loss() -> None:
    """Cells measured with a known loss, at the degrees the advice ranks: the fit recovers it, and
    finds none in cells that have none."""
    truth = dataclasses.replace(TRUTH, mps_thrash=0.5)
    workloads = [profile("a", sm=0.2, dram=0.05), profile("b", sm=0.3, dram=0.3)]
    cells = [_observed(truth, p, m, d) for p in workloads for m in ("naive", "mps") for d in (2, 3, 7, 14, 28)]
    assert fit(cells).mps_thrash == pytest.approx(0.5)
    plain = [_observed(TRUTH, p, m, d) for p in workloads for m in ("naive", "mps") for d in (2, 3, 7, 14, 28)]
    assert fit(plain).mps_thrash == 0.0


def test_a_configurations_repeats_are_one_observation() -> None:
    """Three runs of one configuration, one of them slowed by half from outside: fitted as their
    median, the parameters are the truth's; each run fitted alone, they are not."""
    p = profile("a", sm=0.25)
    runs = [_observed(TRUTH, p, "mps", d, scale, r) for d in (2, 3, 7) for r, scale in enumerate((1.0, 0.5, 1.0))]
    naive = [_observed(TRUTH, p, "naive", d) for d in (2, 3, 7)]
    merged = by_configuration(runs + naive)
    assert len(merged) == 6
    assert {o.agg_samples_per_s for o in merged if o.candidate.mode == "mps"} == {
        o.agg_samples_per_s for o in runs if o.cell_id.endswith("r0")
    }
    fitted = fit(runs + naive)
    assert (fitted.mps.capacity, fitted.mps.sharpness, fitted.mps_thrash) == pytest.approx((0.9, 4.0, 0.0))
    assert fitted.residual("mps") == pytest.approx(0.0, abs=1e-6)
    # Without a group every run is its own configuration: the slow runs pull the fit away.
    alone = fit([dataclasses.replace(o, group="") for o in runs] + naive)
    assert (alone.mps.capacity, alone.mps.sharpness) != pytest.approx((0.9, 4.0))
    assert (alone.residual("mps") or 0.0) > 0.3


def test_a_new_solo_joins_every_run_before_it() -> None:
    """A new solo combined with a history of five runs is the median of six runs, not the mean of
    the new run and the history's median, and its interval is that of six runs."""
    rates = (10_000.0, 10_200.0, 10_400.0, 10_600.0, 10_800.0)
    history = combine([dataclasses.replace(profile(rate=r), cell_dirs=(f"/x/{r}",)) for r in rates])
    new = profile(rate=7_000.0)
    joined = combine([new, history])
    assert joined.runs == (7_000.0, 10_000, 10_200, 10_400, 10_600, 10_800)
    assert joined.samples_per_s == pytest.approx(10_300.0)
    # SM activity per sample: the history's five runs against the new one, not one against one.
    slow = dataclasses.replace(new, sm_active=0.2 * 7_000.0 / 10_000.0 * 1.5)  # 1.5x the history's per sample
    per_sample = combine([slow, history]).sm_active / 10_300.0
    history_per_sample = sum(0.2 / r for r in rates) / 5
    assert per_sample == pytest.approx((5 * history_per_sample + 1.5 * 0.2 / 10_000.0) / 6, rel=1e-6)
    assert joined.rate_rel_hw is not None and joined.rate_rel_hw < 0.2
    two = combine([new, dataclasses.replace(profile(rate=10_400.0), cell_dirs=("/x/b",))])
    assert two.rate_rel_hw is not None and two.rate_rel_hw > 1.0  # two runs far apart: a t-interval of 1 dof


def _plateau(rel: float) -> list[Prediction]:
    """MPS predictions of one workload, best first, each with a +-``rel`` interval."""
    preds = [predict(cell("mps", profile("w", sm=0.2), d), H200, TRUTH) for d in (2, 3, 7, 14, 28)]
    preds.sort(key=lambda q: -(q.agg_samples_per_s or 0.0))
    return [
        dataclasses.replace(q, agg_interval=Interval(v, v * (1 - rel), v * (1 + rel), 5, "fit+profile"))
        for q in preds
        if (v := q.agg_samples_per_s) is not None
    ]


def test_the_knee_of_the_plateau_is_confirmed_second() -> None:
    """Past saturation the predictions are a plateau: the smallest degree tied with the best is
    measured with it, and picked where it measures better (resnet26 on an H200: x7 above x28)."""
    preds = _plateau(0.4)
    assert preds[0].degree in (14, 28) and {q.degree for q in preds[:3]} == {7, 14, 28}
    ordered = plateau_order(preds)
    assert [q.degree for q in ordered[:2]] == [preds[0].degree, 7]
    assert sorted(q.label for q in ordered) == sorted(q.label for q in preds)
    truth = {q.label: (70_000.0 if q.degree == 7 else 61_000.0) for q in preds}

    def measure(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        return {q.label: (truth[q.label], "/c", False) for q in batch}

    assert successive_halving(ordered, 2, 1e6, 60.0, measure).pick == "w mps x7"
    # A best whose interval is narrow has no tie below it; nor has a ranking of two, or one without intervals.
    assert plateau_order(_plateau(0.0)) == _plateau(0.0)
    assert plateau_order(preds[:2]) == preds[:2]
    bare = [dataclasses.replace(q, agg_interval=None) for q in preds]
    assert plateau_order(bare) == bare


def _row(degree: int, rate: float, atp: int | None = None, extrapolated: bool = False) -> Prediction:
    """An MPS prediction of ``rate`` samples/s with a +-30% interval (mobilenetv3's on one H200)."""
    q = predict(cell("mps", profile("w", sm=0.2), degree), H200, TRUTH)
    return dataclasses.replace(
        q,
        label=f"w mps x{degree}" + (f" atp={atp}" if atp else ""),
        agg_samples_per_s=rate,
        agg_interval=Interval(rate, rate * 0.7, rate * 1.3, 5, "fit+profile"),
        active_thread_percentage=(atp,) * degree if atp else None,
        extrapolated=extrapolated,
    )


def test_a_best_at_the_plateaus_small_end_is_confirmed_with_its_far_end() -> None:
    """mobilenetv3 on one H200 (twenty-third session): predicted x7 46,738, x7 with equal thread
    shares alike, x14 46,263, x16 (extrapolated) 46,060; measured x14 23% above x7. The second
    measured is x14, the plateau's far end inside the fitted range, not x7 again with thread shares."""
    rows = [
        _row(7, 46_738.0),
        _row(7, 46_738.0, atp=15),
        _row(14, 46_263.0),
        _row(14, 46_263.0, atp=8),
        _row(16, 46_060.0, extrapolated=True),
        _row(3, 25_338.0),
    ]
    ordered = plateau_order(rows)
    assert [q.label for q in ordered] == [
        "w mps x7",
        "w mps x14",
        "w mps x16",
        "w mps x3",
        "w mps x7 atp=15",
        "w mps x14 atp=8",
    ]
    truth = {"w mps x7": 44_785.0, "w mps x14": 55_010.0}

    def measure(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        return {q.label: (truth.get(q.label, 40_000.0), "/c", False) for q in batch}

    assert successive_halving(ordered, 2, 1e6, 60.0, measure).pick == "w mps x14"
    # Only an extrapolated degree above the best: it is the far end then.
    assert [q.label for q in plateau_order([rows[0], rows[4], rows[5]])][:2] == ["w mps x7", "w mps x16"]
    # Fewer than three distinct configurations: as predicted, the variants last.
    two = [_row(7, 46_738.0), _row(7, 46_738.0, atp=15), _row(14, 46_263.0)]
    assert [q.label for q in plateau_order(two)] == ["w mps x7", "w mps x14", "w mps x7 atp=15"]
    # A naive configuration is never the other end of an MPS plateau.
    naive = dataclasses.replace(_row(14, 46_500.0), mode="naive", label="w naive x14")
    assert [q.label for q in plateau_order([rows[0], naive, rows[5]])][:2] == ["w mps x7", "w naive x14"]
    assert plateau_order([rows[0], naive, rows[5], rows[2]])[1].label == "w mps x14"
    # Nothing tied (every other far below): the order is the predicted one, variants last.
    low = [_row(7, 46_738.0), _row(7, 46_738.0, atp=15), _row(3, 25_338.0), _row(2, 16_893.0)]
    assert [q.label for q in plateau_order(low)] == ["w mps x7", "w mps x3", "w mps x2", "w mps x7 atp=15"]


def test_a_probed_configuration_joins_the_first_rung_for_free() -> None:
    """On one H200 the advisor probed mobilenetv3's MPS x16 (55,017 samples/s) and then confirmed x14
    and x7 in new cells: the probe's cell is a rung-0 measurement already. It joins rung 0 beside the
    top k, first and reused (no cell run for it), and can be the pick; without it the top k alone run."""
    rows = [_row(14, 49_662.0), _row(7, 47_896.0), _row(16, 49_500.0), _row(3, 25_338.0)]
    truth = {"w mps x14": 55_058.0, "w mps x7": 35_476.0, "w mps x16": 56_000.0}
    ran: list[str] = []

    def measure(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        ran.extend(q.label for q in batch)
        return {q.label: (truth.get(q.label, 20_000.0), "/c", q.label == "w mps x16") for q in batch}

    h = successive_halving(rows, 2, 1e6, 60.0, measure, free=frozenset({"w mps x16", "w mps x99"}))
    assert ran == ["w mps x16", "w mps x14", "w mps x7"] and h.pick == "w mps x16"
    assert [m.reused for m in h.measured] == [True, False, False]
    ran.clear()
    assert successive_halving(rows, 2, 1e6, 60.0, measure).pick == "w mps x14" and ran == ["w mps x14", "w mps x7"]
    # No rung fits the budget: nothing is measured, the free ones neither.
    ran.clear()
    assert successive_halving(rows, 2, 10.0, 60.0, measure, free=frozenset({"w mps x16"})).pick is None and not ran
    # A free one already among the top k is measured once.
    ran.clear()
    successive_halving(rows, 2, 1e6, 60.0, measure, free=frozenset({"w mps x14"}))
    assert ran == ["w mps x14", "w mps x7"]
    # A tight budget: each paid cell takes 60 s of a 130 s budget; the free one is measured first and
    # outside the budget, and is the pick.
    now = [0.0]

    def clock() -> float:
        return now[0]

    def paid(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        reused = batch[0].label == "w mps x16"
        now[0] += 0.0 if reused else 60.0
        return measure(batch, scale)

    ran.clear()
    h = successive_halving(rows, 2, 130.0, 60.0, paid, clock, free=frozenset({"w mps x16"}))
    assert ran == ["w mps x16", "w mps x14", "w mps x7"] and h.pick == "w mps x16" and h.stopped == "done"


def test_default_probes_skip_the_degrees_the_fit_covers() -> None:
    """The default probes (8 and the largest ranked) leave out what the other workloads' cells
    already cover in that mode, except MPS at the largest ranked; probe_degrees given are run as given."""
    from raycolloc.advise.measure import fitted_reach, probe_words
    from raycolloc.advise.run import parse_request
    from tests.test_advise_confirm import _profiled

    gpu = dataclasses.replace(H200, cores=32)
    profiled = [_profiled(profile("tiny_cnn", mem=2000.0))]
    req = parse_request(["workload=tiny_cnn", "degrees=1,2,28"], (1,))
    everything = {label for label, _ in probe_words(profiled, req, gpu)}
    assert everything == {f"tiny_cnn {m} x{d}" for m in ("naive", "mps") for d in (8, 32)}
    covered = {"naive": 28, "mps": 7}
    assert {label for label, _ in probe_words(profiled, req, gpu, covered)} == {
        "tiny_cnn naive x32",
        "tiny_cnn mps x8",
        "tiny_cnn mps x32",
    }
    # Covered in both modes up to the largest ranked (the corpus as the prior): MPS at the largest ranked
    # alone is probed (the calibration past saturation), as where the fit's MPS cells stop below it.
    assert [label for label, _ in probe_words(profiled, req, gpu, {"naive": 32, "mps": 32})] == ["tiny_cnn mps x32"]
    assert [label for label, _ in probe_words(profiled, req, gpu, {"naive": 32, "mps": 28})] == ["tiny_cnn mps x32"]
    # The probes are labelled as the ranking labels its candidates (the confirmation finds them by label).
    ranked = {c.label for c in uniform_candidates(profiled[0].profile, gpu, (8, 32))}
    assert everything <= ranked
    given = parse_request(["workload=tiny_cnn", "probe_degrees=8"], (1,))
    assert {label for label, _ in probe_words(profiled, given, gpu, covered)} == {
        "tiny_cnn naive x8",
        "tiny_cnn mps x8",
    }
    fitted = dataclasses.replace(TRUTH, degrees=(("naive", (2, 3, 28)), ("mps", (2, 7))))
    assert fitted_reach(fitted) == {"naive": 28, "mps": 7} and fitted_reach(TRUTH) == {"naive": 0, "mps": 0}


def test_a_profile_is_measured_until_it_is_steady(monkeypatch: pytest.MonkeyPatch) -> None:
    """A solo whose interval is wide runs again (the next repeat), up to three runs, and the profile
    is their median; a narrow one, or one whose history already holds three runs, runs no more."""
    import types

    import raycolloc.advise.measure as measure
    from raycolloc.advise.profile import profile_key
    from raycolloc.advise.run import parse_request
    from tests.test_advise_confirm import _profiled

    ran: list[tuple[str, ...]] = []
    rates = iter((10_400.0, 10_300.0))

    def run_cells(run_dir: object, cells: list[tuple[str, tuple[str, ...]]], request: object) -> list[object]:
        ran.append(cells[0][1])
        return [types.SimpleNamespace(status="ok", cell_dir=f"/cells/{len(ran)}")]

    def profile_in(where: object, out_root: object) -> tuple[Profile, None]:
        rate = next(rates)
        return dataclasses.replace(profile("w", rate=rate), rate_rel_hw=0.02, cell_dirs=(str(where),)), None

    monkeypatch.setattr(measure, "run_cells", run_cells)
    monkeypatch.setattr(measure, "profile_in", profile_in)
    request = parse_request(["workload=w"], (1,))
    spec = types.SimpleNamespace(config=types.SimpleNamespace(out_dir="/out"))

    def profiled(p: Profile) -> list[Profiled]:
        return [dataclasses.replace(_profiled(p), spec=spec)]

    slow = dataclasses.replace(profile("w", rate=7_441.0), rate_rel_hw=0.16)
    got = measure.steady_profiles(profiled(slow), request, {}, Path("/adv"))[0].profile
    assert ran == [("workload=w", "mode=naive", "degree=1", f"repeat={i}") for i in (1, 2)]
    assert got is not None and got.runs == (7_441.0, 10_300.0, 10_400.0) and got.samples_per_s == 10_300.0
    ran.clear()
    steady = dataclasses.replace(slow, rate_rel_hw=0.05)
    assert measure.steady_profiles(profiled(steady), request, {}, Path("/adv"))[0].profile is steady and not ran
    history = combine([dataclasses.replace(profile("w", rate=r), cell_dirs=(f"/h/{r}",)) for r in (10_000.0, 10_500.0)])
    found = {profile_key(slow.gpu_name, slow.workload, slow.settings): history}
    assert measure.steady_profiles(profiled(slow), request, found, Path("/adv"))[0].profile is slow and not ran
    # The history read before the further runs holds the first solo itself (its cell under out_dir):
    # it is one run, not two, and three runs are still measured.
    rates = iter((10_400.0, 10_300.0))
    own = {profile_key(slow.gpu_name, slow.workload, slow.settings): slow}
    got = measure.steady_profiles(profiled(slow), request, own, Path("/adv"))[0].profile
    assert len(ran) == 2 and got is not None and got.runs == (7_441.0, 10_300.0, 10_400.0)
    # A prior that covers every ranked degree (the corpus on an H200) stands in for the repeats.
    ran.clear()
    assert measure.steady_profiles(profiled(slow), request, {}, Path("/adv"), lambda p: True)[0].profile is slow
    assert not ran
    covers = measure.prior_covers(dataclasses.replace(TRUTH, degrees=(("naive", (2, 16)), ("mps", (2, 16)))), H200)
    assert covers(dataclasses.replace(slow, job_mem_mib=20_000.0))  # at most 6 fit: x16 covers them
    assert not measure.prior_covers(TRUTH, H200)(slow)  # no fitted cell: nothing covered


def test_a_window_between_two_samples_takes_the_nearest_ones() -> None:
    """A measured window with no GPU sample inside (shorter than the sampler's period) is described
    by the nearest sample on each side; one with samples inside, by those alone."""
    import pandas as pd

    from raycolloc.advise.profile import _window_means

    tel = pd.DataFrame(
        {
            "scope": ["gpu", "gpu", "gpu", "process", "gpu"],
            "ts": [1.0, 2.0, 4.0, 3.0, 9.0],
            "sm_active": [10.0, 20.0, 40.0, 99.0, 90.0],
        }
    )
    between = pd.Series({"measured_start_ts": 2.5, "measured_end_ts": 3.5})
    assert _window_means(between, tel)["sm_active"] == pytest.approx(30.0)  # 2.0 and 4.0, not the process row
    inside = pd.Series({"measured_start_ts": 1.5, "measured_end_ts": 4.5})
    assert _window_means(inside, tel)["sm_active"] == pytest.approx(30.0)  # 20 and 40 inside
    late = pd.Series({"measured_start_ts": 10.0, "measured_end_ts": 11.0})
    assert _window_means(late, tel)["sm_active"] == pytest.approx(90.0)  # nothing after: the last before


def test_a_candidate_whose_interval_lies_below_the_bests_is_not_confirmed() -> None:
    """regnetx_004 on one H200: MPS x7 predicted [29,094, 41,762] samples/s, x16 [53,265, 75,533]: only
    x16 could be the best, so only it is measured; one reaching the best's low bound stays, as do a
    candidate without an interval and a probed one (its cell is there already)."""
    from raycolloc.advise.confirm import contenders

    x16, x7, x14 = _row(16, 63_429.0), _row(7, 34_857.0), _row(14, 50_000.0)
    x7 = dataclasses.replace(x7, agg_interval=Interval(34_857.0, 29_094.0, 41_762.0, 7, "fit+profile"))
    x16 = dataclasses.replace(x16, agg_interval=Interval(63_429.0, 53_265.0, 75_533.0, 16, "fit+profile"))
    assert [q.label for q in contenders([x16, x7])] == ["w mps x16"]
    assert [q.label for q in contenders([x7, x16, x14])] == ["w mps x16", "w mps x14"]  # x14 reaches 53,265
    bare = dataclasses.replace(x7, agg_interval=None)
    assert [q.label for q in contenders([x16, bare])] == ["w mps x16", "w mps x7"]
    assert [q.label for q in contenders([x16, x7], keep=frozenset({"w mps x7"}))] == ["w mps x16", "w mps x7"]
    assert contenders([]) == []
    # A probe measured x16 above x14's predicted 95% upper bound: x14 is ruled out by the measurement
    # (and a probe's own label stays a contender whatever it measured).
    x14 = dataclasses.replace(x14, agg_interval=Interval(50_000.0, 42_000.0, 60_000.0, 14, "fit+profile"))
    assert [q.label for q in contenders([x16, x14])] == ["w mps x16", "w mps x14"]
    assert [q.label for q in contenders([x16, x14], measured={"w mps x16": 61_000.0})] == ["w mps x16"]
    assert [q.label for q in contenders([x16, x14], measured={"w mps x16": 59_000.0})] == ["w mps x16", "w mps x14"]
    ran: list[str] = []

    def measure(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        ran.extend(q.label for q in batch)
        return {q.label: (51_727.0, "/c", False) for q in batch}

    assert successive_halving(plateau_order(contenders([x16, x7])), 2, 1e6, 60.0, measure).pick == "w mps x16"
    assert ran == ["w mps x16"]


def test_where_the_only_contender_measures_nothing_the_ruled_out_are_measured() -> None:
    """The one contender's cell failed (out of memory, an error): the candidates its interval ruled out
    are measured then, so the pick is still a measured configuration (before contenders, the second
    candidate stood beside it)."""
    from raycolloc.advise.confirm import confirm

    x16 = dataclasses.replace(
        _row(16, 63_429.0), agg_interval=Interval(63_429.0, 53_265.0, 75_533.0, 16, "fit+profile")
    )
    x7 = dataclasses.replace(_row(7, 34_857.0), agg_interval=Interval(34_857.0, 29_094.0, 41_762.0, 7, "fit+profile"))
    ran: list[str] = []

    def measure(batch: list[Prediction], scale: int) -> dict[str, tuple[float | None, str, bool]]:
        ran.extend(q.label for q in batch)
        return {q.label: (None if q.degree == 16 else 32_269.0, "/c", False) for q in batch}

    h = confirm([x16, x7], 2, 1e6, 60.0, measure)
    assert h.pick == "w mps x7" and ran == ["w mps x16", "w mps x7"] and "ruled out" in h.stopped
    ran.clear()
    assert confirm([x16, x7], 2, 1e6, 60.0, lambda b, s: {q.label: (51_727.0, "/c", False) for q in b}).pick == (
        "w mps x16"
    )
