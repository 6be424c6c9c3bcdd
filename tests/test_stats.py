"""Intervals on synthetic timings with a known spread (issue 30): the t-interval covers the true
mean about 95% of the time, sums and ratios propagate, verdicts respect the error bars."""

from __future__ import annotations

import random

import pytest

from raycolloc.results.stats import (
    Interval,
    cv,
    is_unstable,
    mean_interval,
    point,
    ratio_interval,
    sum_interval,
    t_quantile,
    verdict,
    window_interval,
)


def test_t_quantile_table_and_normal_tail() -> None:
    assert t_quantile(1) == pytest.approx(12.706)
    assert t_quantile(4) == pytest.approx(2.776)
    assert t_quantile(1000) == pytest.approx(1.96)
    with pytest.raises(ValueError):
        t_quantile(0)


def test_mean_interval_matches_hand_computation() -> None:
    xs = [10.0, 12.0, 11.0, 13.0, 9.0]  # mean 11, stdev sqrt(2.5)
    i = mean_interval(xs)
    assert i.value == pytest.approx(11.0)
    assert i.half_width == pytest.approx(2.776 * (2.5**0.5) / 5**0.5, rel=1e-3)
    assert i.n == 5 and i.method == "repeats" and i.known


def test_interval_covers_true_mean_about_95_percent() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(2000):
        i = mean_interval([rng.gauss(100.0, 10.0) for _ in range(5)])
        covered += i.low <= 100.0 <= i.high
    assert 0.93 <= covered / 2000 <= 0.97


def test_window_interval_rate_is_the_epochs_and_width_follows_spread() -> None:
    steady = window_interval([1000] * 10, [1.0] * 10)
    assert steady.value == pytest.approx(1000.0) and steady.half_width == pytest.approx(0.0)
    rng = random.Random(3)
    secs = [1.0 / rng.uniform(0.9, 1.1) for _ in range(10)]
    noisy = window_interval([1000] * 10, secs)
    assert noisy.value == pytest.approx(10000 / sum(secs))
    assert 0.01 < noisy.rel_half_width < 0.1 and noisy.method == "windows"
    assert not window_interval([5], [1.0]).known


def test_sum_and_ratio_propagate_in_quadrature() -> None:
    a = Interval(100.0, 97.0, 103.0, 5, "repeats")
    b = Interval(100.0, 96.0, 104.0, 5, "repeats")
    s = sum_interval([a, b])
    assert s.value == 200.0 and s.half_width == pytest.approx(5.0)
    r = ratio_interval(a, b)
    assert r.value == pytest.approx(1.0) and r.rel_half_width == pytest.approx(0.05)
    assert ratio_interval(point(4.0), point(2.0)) == point(2.0)
    assert sum_interval([point(1.0), a]).half_width == pytest.approx(3.0)


def test_pyperf_rule_flags_ten_percent_spread() -> None:
    assert not is_unstable([100, 101, 99, 100])
    assert is_unstable([100, 80, 120])
    assert cv([5.0]) == 0.0


def test_verdicts_respect_the_interval() -> None:
    assert verdict(Interval(1.05, 1.02, 1.08, 3, "ratio"), 1.0) == "yes"
    assert verdict(Interval(0.95, 0.92, 0.98, 3, "ratio"), 1.0) == "no"
    assert verdict(Interval(1.01, 0.97, 1.05, 3, "ratio"), 1.0) == "inconclusive"
    assert verdict(Interval(0.95, 0.92, 0.98, 3, "ratio"), 1.0, above_is_yes=False) == "yes"
    assert verdict(point(1.2), 1.0) == "yes"
