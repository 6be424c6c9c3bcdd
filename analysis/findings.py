"""What the sweeps found: the best configuration per workload and a verdict on each of the study's
claims, with the numbers behind it.

Pure functions of the tables (:mod:`analysis.tables`, :mod:`analysis.mixed`). A claim the data
cannot speak to says what is missing ("not enough data: no mixed cells in mode mig") instead of
guessing. Thresholds are stated in each verdict's text. A ratio is judged by its 95% interval
(:func:`raycolloc.results.stats.verdict`): a case whose interval crosses the threshold cannot tell
(``inconclusive``); the runs' min-max spread and the interval's half-width are quoted beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.intervals import bounds_of, pm_text
from raycolloc.job.workloads.registry import create_workload
from raycolloc.mode_kinds import BASELINE_MODE, Sharing, modes_where
from raycolloc.results.stats import Interval, point, ratio_interval, verdict

__all__ = ["GREAT_GAIN", "LITTLE_GAIN", "MEMORY_TOLERANCE", "Verdict", "best_configs", "claims", "workload_size"]

# The paper's claims name MPS and MIG; here they are the modes whose jobs share the SMs side by side
# and the one that partitions the GPU (raycolloc.mode_kinds).
_CONCURRENT = modes_where(lambda k: k.sharing is Sharing.CONCURRENT)[0]
_PARTITIONED = modes_where(lambda k: k.partitioned)[0]

GREAT_GAIN = 1.5  # "gain greatly": the best collocation at least 1.5x the workload's best solo
LITTLE_GAIN = 1.2  # "gain little": the best collocation below 1.2x the best solo
MEMORY_TOLERANCE = 0.2  # "about the sum": within 20% of the solos' footprints added up


@dataclass(frozen=True)
class Verdict:
    """One claim of the study, judged: ``supported``, ``partly``, ``not supported``,
    ``inconclusive`` (the runs' spread reaches across the threshold) or ``not enough data``
    (``evidence`` then says what is missing)."""

    claim: str
    verdict: str
    evidence: str


def _judge(outcomes: list[bool | None]) -> str:
    """A claim's verdict from its cases: True holds, False does not, None cannot tell (the runs'
    spread reaches across the threshold)."""
    known = [o for o in outcomes if o is not None]
    if known and all(known) and len(known) == len(outcomes):
        return "supported"
    if known and not any(known) and len(known) == len(outcomes):
        return "not supported"
    if any(known) and not all(known):
        return "partly"
    return "inconclusive"


def _side(row: pd.Series, column: str, threshold: float, above: bool) -> bool | None:
    """Whether ``row[column]`` is on the wanted side of ``threshold`` (``above`` or below it), by
    its 95% interval (``<column>_low``/``_high``); None when the interval crosses the threshold."""
    return _holds(_interval(row, column), threshold, above)


def _interval(row: pd.Series, column: str) -> Interval:
    found = bounds_of(row[column], row.get(f"{column}_low"), row.get(f"{column}_high"))
    return found if found is not None else point(float("nan"))


def _suffixed(row: pd.Series, column: str, suffix: str) -> Interval:
    """``_interval`` of a merged row, whose columns got ``suffix`` (``<column>_low<suffix>``)."""
    found = bounds_of(row[f"{column}{suffix}"], row.get(f"{column}_low{suffix}"), row.get(f"{column}_high{suffix}"))
    return found if found is not None else point(float("nan"))


def _holds(interval: Interval, threshold: float, above: bool) -> bool | None:
    said = verdict(interval, threshold, above_is_yes=above)
    return None if said == "inconclusive" else said == "yes"


def workload_size(name: str) -> str | None:
    """The study's size class of a registered workload (S, M, L, XL, tiny), None if unknown."""
    try:
        return create_workload(str(name)).size
    except KeyError:
        return None


def _x(value: float, low: float | None = None, high: float | None = None, ci: Interval | None = None) -> str:
    """``1.50x (0.83-2.00) ±46.1%``: the value, the runs' min-max (several runs), the 95% interval."""
    text = f"{value:.2f}x"
    if low is not None and high is not None and pd.notna(low) and pd.notna(high) and abs(high - low) > 1e-9:
        text += f" ({low:.2f}-{high:.2f})"
    if ci is not None and ci.known and (pm := pm_text(ci.value, ci.low, ci.high)):
        text += f" {pm}"
    return text


def best_configs(gain: pd.DataFrame) -> pd.DataFrame:
    """Per workload and GPU model, the ok configuration with the highest median aggregate throughput.

    Columns: ``workload, gpu_name, mode, degree, settings, n_ok, agg_samples_per_s`` (with spread),
    ``gain_vs_solo`` and ``gain_vs_best_solo`` (with spread), ``best_solo``, ``gain_uncertain``,
    ``energy_vs_solo`` (with spread); each number's 95% interval (``_low``/``_high``), so the report's
    first table shows it as every other table does.
    """
    ok = gain[(gain["status"] == "ok") & gain["agg_samples_per_s"].notna()]
    if ok.empty:
        return gain.iloc[0:0]
    best = ok.loc[ok.groupby(["workload", "gpu_name"], dropna=False)["agg_samples_per_s"].idxmax()]
    cols = [
        "workload",
        "gpu_name",
        "mode",
        "degree",
        "settings",
        "n_ok",
        "agg_samples_per_s",
        "agg_samples_per_s_min",
        "agg_samples_per_s_max",
        "gain_vs_solo",
        "gain_vs_solo_min",
        "gain_vs_solo_max",
        "gain_vs_best_solo",
        "gain_vs_best_solo_min",
        "gain_vs_best_solo_max",
        "best_solo",
        "gain_uncertain",
        "energy_vs_solo",
        "energy_vs_solo_min",
        "energy_vs_solo_max",
    ]
    numbers = ("agg_samples_per_s", "gain_vs_solo", "gain_vs_best_solo", "energy_vs_solo")
    cols += [f"{c}{side}" for c in numbers for side in ("_low", "_high") if f"{c}{side}" in best]
    return best[cols].reset_index(drop=True)


def _best_collocated(gain: pd.DataFrame, sizes: tuple[str, ...]) -> tuple[pd.DataFrame, list[str]]:
    """Per workload of those sizes: its best ok collocated (degree > 1) configuration; and the
    workloads of those sizes without one."""
    of_size = gain[gain["workload"].map(workload_size).isin(sizes)]
    collocated = of_size[(of_size["degree"] > 1) & (of_size["status"] == "ok") & of_size["gain_vs_best_solo"].notna()]
    best = (
        collocated.loc[collocated.groupby(["workload", "gpu_name"])["gain_vs_best_solo"].idxmax()]
        if not collocated.empty
        else collocated
    )
    lacking = sorted(set(of_size["workload"]) - set(best["workload"]))
    return best, lacking


def _describe(row: pd.Series) -> str:
    low, high = row.get("gain_vs_best_solo_min"), row.get("gain_vs_best_solo_max")
    flag = " (runs reach across 1.0)" if pd.notna(low) and pd.notna(high) and low <= 1.0 <= high and high > low else ""
    ci = _interval(row, "gain_vs_best_solo")
    return (
        f"{row['workload']}: {_x(row['gain_vs_best_solo'], low, high, ci)}"
        f" of its best solo at {row['mode']} x{int(row['degree'])}{flag}"
    )


def _small_models(gain: pd.DataFrame) -> Verdict:
    claim = "Small and medium models gain greatly from collocation"
    best, lacking = _best_collocated(gain, ("S", "M", "tiny"))
    if best.empty:
        missing = (
            f"no ok collocated (degree > 1) cell of {', '.join(lacking)}"
            if lacking
            else "no small or medium workload (S: resnet26_cifar10; M: resnet50_imagenet64, "
            "efficientnetv2s_imagenet64; tiny CPU presets count as small)"
        )
        return Verdict(claim, "not enough data", missing)
    judged = _judge([_side(r, "gain_vs_best_solo", GREAT_GAIN, above=True) for _, r in best.iterrows()])
    evidence = "; ".join(_describe(r) for _, r in best.iterrows())
    evidence += f". Threshold: best collocation >= {GREAT_GAIN}x the workload's best solo."
    if lacking:
        evidence += f" No collocated cell of {', '.join(lacking)}."
    return Verdict(claim, judged, evidence)


def _large_models(gain: pd.DataFrame) -> Verdict:
    claim = "Large models gain little from collocation or do not fit"
    large = gain[gain["workload"].map(workload_size).isin(("L", "XL")) & (gain["degree"] > 1)]
    if large.empty:
        return Verdict(
            claim,
            "not enough data",
            "no collocated (degree > 1) cell of a large workload "
            "(L: resnet152_imagenet, cait_xxs24_imagenet; XL: dlrm_criteo)",
        )
    parts: list[str] = []
    holds: list[bool | None] = []
    for workload, rows in large.groupby("workload"):
        ok = rows[(rows["status"] == "ok") & rows["gain_vs_best_solo"].notna()]
        unfit = rows[rows["status"].str.contains("oom|unfit", regex=True)]
        if not ok.empty:
            top = ok.loc[ok["gain_vs_best_solo"].idxmax()]
            holds.append(_side(top, "gain_vs_best_solo", LITTLE_GAIN, above=False))
            parts.append(_describe(top))
        if not unfit.empty:
            holds.append(True)
            cells = ", ".join(f"{m} x{int(d)}" for m, d in zip(unfit["mode"], unfit["degree"], strict=True))
            parts.append(f"{workload}: {cells} did not fit ({'/'.join(sorted(set(unfit['status'])))})")
    if not holds:
        return Verdict(
            claim, "not enough data", "large workloads' collocated cells neither finished nor ran out of memory"
        )
    return Verdict(claim, _judge(holds), "; ".join(parts) + f". Threshold: below {LITTLE_GAIN}x the best solo.")


def _memory(gain: pd.DataFrame, mixed: pd.DataFrame) -> Verdict:
    claim = "Collocated memory is about the sum of the solo footprints"
    ok = gain[(gain["status"] == "ok") & gain["mem_used_max_mib"].notna()]
    solo = ok[ok["degree"] == 1].groupby(["workload", "gpu_name", "mode", "settings"])["mem_used_max_mib"].median()
    ratios = []
    for _, row in ok[ok["degree"] > 1].iterrows():
        ref = solo.get((row["workload"], row["gpu_name"], row["mode"], row["settings"]))
        if ref is not None and ref > 0:
            ratios.append(
                (
                    f"{row['workload']} {row['mode']} x{int(row['degree'])}",
                    row["mem_used_max_mib"] / (ref * row["degree"]),
                )
            )
    ok_mixed = mixed[(mixed["status"] == "ok") & mixed["mem_used_max_mib"].notna()]
    for (mix, mode, _), rows in ok_mixed.groupby(["mix", "mode", "repeat_group"]):
        per_cell = rows.groupby(["sweep", "cell_id"]).agg(
            mem=("mem_used_max_mib", "first"), solos=("solo_mem_used_max_mib", lambda s: s.sum(min_count=len(s)))
        )
        ratio = (per_cell["mem"] / per_cell["solos"]).median()
        if pd.notna(ratio):
            ratios.append((f"mix {mix} {mode}", ratio))
    if not ratios:
        return Verdict(claim, "not enough data", "no ok collocated cell with GPU memory telemetry and its solo")
    values = pd.Series([r for _, r in ratios])
    near = (values - 1.0).abs() <= MEMORY_TOLERANCE
    worst = sorted(ratios, key=lambda p: abs(p[1] - 1.0), reverse=True)[:3]
    evidence = (
        f"collocated / summed solo memory: median {values.median():.2f}, range {values.min():.2f}-"
        f"{values.max():.2f} over {len(values)} configurations; furthest: "
        + ", ".join(f"{name} {r:.2f}" for name, r in worst)
        + f". Threshold: within {MEMORY_TOLERANCE:.0%} of the sum."
    )
    return Verdict(claim, _judge([bool(n) for n in near]), evidence)


def _mps_vs_naive(gain: pd.DataFrame, table2: pd.DataFrame) -> Verdict:
    claim = "MPS does at least as well as naive collocation"
    ok = gain[(gain["status"] == "ok") & (gain["degree"] > 1)]
    idx = ["workload", "gpu_name", "degree", "settings"]
    pairs = ok[ok["mode"] == _CONCURRENT].merge(ok[ok["mode"] == BASELINE_MODE], on=idx, suffixes=("_mps", "_naive"))
    outcomes, parts = [], []
    for _, r in pairs.iterrows():
        mps, naive = _suffixed(r, "agg_samples_per_s", "_mps"), _suffixed(r, "agg_samples_per_s", "_naive")
        ratio = ratio_interval(mps, naive)
        outcomes.append(_at_least(ratio))
        parts.append(f"{r['workload']} x{int(r['degree'])}: {_x(ratio.value, ci=ratio)}")
    mixes = table2[table2["status"] == "ok"]
    for (mix, _gpu), rows in mixes.groupby(["mix", "gpu_name"]):
        by_mode = rows.set_index("mode")
        if {_CONCURRENT, BASELINE_MODE} <= set(by_mode.index):
            mps, naive = by_mode.loc[_CONCURRENT], by_mode.loc[BASELINE_MODE]
            ratio = ratio_interval(_interval(naive, "total_s"), _interval(mps, "total_s"))
            outcomes.append(_at_least(ratio))
            parts.append(f"mix {mix}: {_x(ratio.value, ci=ratio)}")
    if not parts:
        return Verdict(
            claim, "not enough data", "no configuration ran ok in both mps and naive at degree > 1 (or as a mix)"
        )
    ahead = sum(o is True for o in outcomes)
    behind = sum(o is False for o in outcomes)
    evidence = (
        f"MPS / naive throughput (mixes: naive / MPS total time): {'; '.join(parts)}. MPS ahead in {ahead} of "
        f"{len(parts)}, behind in {behind}, within the noise (95% interval across 1) in "
        f"{len(parts) - ahead - behind}."
    )
    return Verdict(claim, _judge(outcomes), evidence)


def _at_least(ratio: Interval) -> bool | None:
    """MPS / naive for "at least as well": its 95% interval above 1 holds, below 1 refutes it, and one
    that crosses 1 cannot tell (``inconclusive``), whichever side its value is on."""
    return _holds(ratio, 1.0, True)


def _mig(gain: pd.DataFrame, epoch2: pd.DataFrame, table2: pd.DataFrame) -> Verdict:
    claim = "MIG isolates jobs but under-uses the GPU on mixed loads"
    uniform = epoch2[
        (epoch2["mode"] == _PARTITIONED) & epoch2["mix"].isna() & (epoch2["degree"] > 1) & (epoch2["status"] == "ok")
    ]
    spread = uniform.groupby(["sweep", "cell_id"])["epoch2_s"].agg(lambda s: s.max() / s.min())
    mixes = table2[table2["status"] == "ok"]
    under, parts, missing = [], [], []
    for (mix, _gpu), rows in mixes.groupby(["mix", "gpu_name"]):
        by_mode = rows.set_index("mode")
        others = [m for m in modes_where(lambda k: not k.partitioned) if m in by_mode.index]
        if _PARTITIONED in by_mode.index and others:
            mig = by_mode.loc[_PARTITIONED]
            best = min(by_mode.loc[m, "total_s"] for m in others)
            under.append(bool(mig["total_s"] > best))
            parts.append(
                f"mix {mix}: MIG {mig['total_s']:.2f} s vs best other mode {best:.2f} s, "
                f"SM activity {mig['sm_active_mean']:.0f}% vs "
                f"{max(by_mode.loc[m, 'sm_active_mean'] for m in others):.0f}%"
            )
    if spread.empty:
        missing.append("no ok uniform MIG cell with degree > 1 (isolation: its jobs' epoch-2 times)")
    else:
        parts.insert(
            0,
            f"uniform MIG cells: slowest/fastest job epoch-2 time {spread.median():.2f} (median of "
            f"{len(spread)} cells; 1.00 = no job slowed by another)",
        )
    if not under:
        missing.append("no mix ran ok in mig and in naive or mps")
    if not parts or (spread.empty and not under):
        return Verdict(claim, "not enough data", "; ".join(missing))
    holds: list[bool | None] = [bool(spread.median() <= 1.15)] if not spread.empty else []
    holds += under
    judged = _judge(holds)
    text = "; ".join(parts) + "."
    if missing:
        text += " Missing: " + "; ".join(missing) + "."
    return Verdict(claim, judged if not missing else f"{judged} (in part)", text)


def _mixing_pays(table2: pd.DataFrame) -> Verdict:
    claim = "Mixing memory- and compute-bound jobs pays (collocated beats one after the other)"
    judged = table2[(table2["status"] == "ok") & table2["change_vs_sequential_pct"].notna()]
    if judged.empty:
        lacking = (
            "no mixed cell"
            if table2.empty
            else "no mixed cell ran ok with the solo cell of each of its jobs (sequential time)"
        )
        return Verdict(claim, "not enough data", lacking)
    parts: list[str] = []
    holds: list[bool | None] = []
    for mix, rows in judged.groupby("mix"):
        best = rows.loc[rows["change_vs_sequential_pct"].idxmin()]
        holds.append(_side(best, "change_vs_sequential_pct", 0.0, above=False))
        flag = " (runs reach across 0)" if best["change_uncertain"] else ""
        ci = _interval(best, "change_vs_sequential_pct")
        pm = f" ±{ci.half_width:.0f}pt" if ci.known else ""
        parts.append(
            f"{mix}: {best['change_vs_sequential_pct']:+.0f}%{pm} in {best['mode']} "
            f"({best['total_s']:.2f} s vs {best['sequential_s']:.2f} s sequential){flag}"
        )
    return Verdict(claim, _judge(holds), "; ".join(parts) + ". Negative: collocation is faster.")


def _energy(gain: pd.DataFrame, table2: pd.DataFrame) -> Verdict:
    claim = "Collocation lowers the energy spent per sample"
    ok = gain[(gain["status"] == "ok") & (gain["degree"] > 1) & gain["energy_vs_solo"].notna()]
    parts: list[str] = []
    holds: list[bool | None] = []
    for workload, rows in ok.groupby("workload"):
        best = rows.loc[rows["energy_vs_solo"].idxmin()]
        holds.append(_side(best, "energy_vs_solo", 1.0, above=False))
        ci = _interval(best, "energy_vs_solo")
        energy = _x(best["energy_vs_solo"], best["energy_vs_solo_min"], best["energy_vs_solo_max"], ci)
        parts.append(f"{workload}: {energy} the solo's J/sample at {best['mode']} x{int(best['degree'])}")
    for mix, rows in table2[(table2["status"] == "ok") & table2["energy_vs_sequential"].notna()].groupby("mix"):
        best = rows.loc[rows["energy_vs_sequential"].idxmin()]
        holds.append(_side(best, "energy_vs_sequential", 1.0, above=False))
        energy = _x(best["energy_vs_sequential"], ci=_interval(best, "energy_vs_sequential"))
        parts.append(f"mix {mix}: {energy} the sequential energy in {best['mode']}")
    if not parts:
        return Verdict(
            claim,
            "not enough data",
            "no ok collocated cell with an energy counter or power samples and its solo (energy per sample needs both)",
        )
    return Verdict(claim, _judge(holds), "; ".join(parts) + ". Below 1: collocation spends less energy per sample.")


def claims(gain: pd.DataFrame, epoch2: pd.DataFrame, mixed: pd.DataFrame, table2: pd.DataFrame) -> list[Verdict]:
    """A verdict on each claim of the study the report checks, in the study's order.

    Args:
        gain: :func:`analysis.tables.gain_table`; epoch2: :func:`analysis.tables.epoch2_table`;
        mixed: :func:`analysis.mixed.mixed_table`; table2: :func:`analysis.mixed.table2`.
    """
    return [
        _small_models(gain),
        _large_models(gain),
        _memory(gain, mixed),
        _mps_vs_naive(gain, table2),
        _mig(gain, epoch2, table2),
        _mixing_pays(table2),
        _energy(gain, table2),
    ]
