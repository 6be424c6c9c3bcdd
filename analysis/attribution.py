"""Why runs were noisy: for each cell, the likely cause, from the noise columns its rows carry
(``raycolloc.driver.noise``: GPU clocks and clock-event reasons, how long the training threads waited
for a core beyond the usual wait, their pre-emptions, core clocks and CPU time per step, foreign GPU
processes, cells side by side).

:func:`likely_causes` names the causes found in one cell, most likely first; :func:`attribute` adds
them to the cells frame as ``likely_cause``; :func:`section` is the report's "Why runs were noisy".
A cause is named when its signal passes a threshold below; "" when nothing stands out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from analysis.page import Column, display, table_html

__all__ = [
    "CLOCK_EVENT_SHARE",
    "CORE_MHZ_DROP",
    "CPU_WAIT_SHARE",
    "FOREIGN_WEIGHT",
    "INVOL_SWITCHES_PER_S",
    "SIDE_BY_SIDE_WEIGHT",
    "SLOW_CORE",
    "USUAL_WAIT_CAP",
    "Baseline",
    "attribute",
    "baseline",
    "likely_causes",
    "section",
]

# A cap held the GPU's clocks in at least this share of the measured window's samples. One 50 ms
# sample of a 3 s window is 1.7%; a tenth of the window at a 40% lower clock costs ~4% of the rate,
# about the noise a quiet degree-7 cell shows (~1%, issue 30) several times over.
CLOCK_EVENT_SHARE = 0.10
# A training thread waited, runnable, for a core this share of its epoch: a CPU-bound launch thread
# loses about as much throughput, the size of the pyperf rule's 10% spread.
CPU_WAIT_SHARE = 0.10
# Without schedstats: pre-empted this often (every 5 ms). A pinned thread on a quiet core is pre-empted
# a few times a second; 200/s is a busy core's scheduler slicing it.
INVOL_SWITCHES_PER_S = 200.0
# The cell's slowest job cores ran this much below the sweep's median core clock: turbo lost to heat
# or load elsewhere on the socket (a few % is ordinary frequency jitter).
CORE_MHZ_DROP = 0.05
# A training thread spent this much more CPU time per step than in its configuration's quickest run,
# without waiting longer for its core: the core itself ran slow. On H200 VMs (16 vCPUs, no steal
# reported) a degree-1 job ran 10,900 samples/s at 6.8 ms a step beside runs at 17,000 and 4.2 ms,
# its wait share 0.22 in both (docs/measurements.md, twenty-second session).
SLOW_CORE = 0.10
# The usual wait is never taken above this: on a GPU it is 0.17-0.29 (H200 VMs); a sweep of one cell,
# or one whose cells are mostly contended, must not make contention the usual.
USUAL_WAIT_CAP = 0.30
# Causes without a measured share of the window are ranked by these (how much of it they may take):
# another process on the GPU shares its SMs for however long it runs; cells side by side slowed
# each other 10-22% on 4 x H200 (issue 30).
FOREIGN_WEIGHT = 0.3
SIDE_BY_SIDE_WEIGHT = 0.2

_THERMAL = {"sw_thermal_slowdown", "hw_thermal_slowdown"}
_POWER = {"sw_power_cap", "hw_slowdown", "hw_power_brake_slowdown", "board_limit", "reliability"}


def _num(row: Mapping[str, object], key: str) -> float | None:
    """A number of the row (None: absent, null or NaN; numpy's numbers count)."""
    value = row.get(key)
    if value is None or isinstance(value, str | bool):
        return None
    try:
        number = float(str(value))
    except ValueError:
        return None
    return None if math.isnan(number) else number


def _clock_causes(row: Mapping[str, object]) -> list[tuple[float, str]]:
    share = _num(row, "clock_event_share")
    events = row.get("clock_events")
    if share is None or share < CLOCK_EVENT_SHARE or not isinstance(events, str):
        return []
    names = set(events.split(","))
    out = []
    if names & _POWER:
        out.append((share, f"clocks dropped ({', '.join(sorted(names & _POWER))})"))
    if names & _THERMAL:
        out.append((share, "thermal cap"))
    return out


@dataclass(frozen=True)
class Baseline:
    """What a cell's CPU readings are compared with, from every cell loaded (:func:`attribute`).

    Args:
        core_mhz: the median of ``core_mhz_min`` (None: no core clocks).
        wait_share: the lower quartile of ``cpu_wait_share_max``: the wait a training thread has
            anyway (on a GPU its one core is shared with CUDA's threads of its own process: 0.21-0.29
            in every degree-1 cell on an H200). Contention is a wait :data:`CPU_WAIT_SHARE` above it.
        quickest_ms: per configuration on one kind of GPU of one host (:func:`_config_key`), the
            least ``cpu_ms_per_step_max`` of its runs.
    """

    core_mhz: float | None = None
    wait_share: float | None = None
    quickest_ms: Mapping[str, float] = field(default_factory=dict)


_KEY_COLUMNS = ("repeat_group", "gpu_name", "hostname")


def _config_key(row: Mapping[str, object]) -> str:
    """The runs a cell's CPU time per step is compared with: its configuration's, on the same kind of
    GPU and host (sweeps of other machines loaded together are not compared)."""
    return "|".join(str(row.get(k)) for k in _KEY_COLUMNS if k in row)


def _slow_core(row: Mapping[str, object], base: Baseline) -> float:
    """How much more CPU time per step the cell's slowest training thread spent than its
    configuration's quickest run (0: unknown, or one run)."""
    ms = _num(row, "cpu_ms_per_step_max")
    quickest = base.quickest_ms.get(_config_key(row))
    return ms / quickest - 1.0 if ms is not None and quickest else 0.0


def _cpu_cause(row: Mapping[str, object], base: Baseline) -> list[tuple[float, str]]:
    wait = _num(row, "cpu_wait_share_max")
    switches = _num(row, "invol_switches_per_s_max")
    mhz = _num(row, "core_mhz_min")
    median_mhz = base.core_mhz
    drop = 1.0 - mhz / median_mhz if mhz is not None and median_mhz else 0.0
    if wait is not None:
        usual = base.wait_share or 0.0
        contended = wait >= CPU_WAIT_SHARE and wait - usual >= CPU_WAIT_SHARE
        weight = wait
    else:  # no schedstats on this host: pre-emptions alone
        contended = switches is not None and switches >= INVOL_SWITCHES_PER_S
        weight = min(1.0, (switches or 0.0) / 1000.0)
    if not contended and drop < CORE_MHZ_DROP:
        slower = _slow_core(row, base)
        if slower < SLOW_CORE:
            return []
        text = f"CPU time per step +{slower:.0%} over the configuration's quickest run, its wait for a core as usual"
        return [(slower / (1.0 + slower), f"core ran slow ({text})")]
    parts = []
    if wait is not None:
        beside = f", {base.wait_share:.0%} in the usual cell" if base.wait_share is not None else ""
        parts.append(f"waited for a core {wait:.0%} of epoch 2{beside}")
    if switches is not None:
        parts.append(f"{switches:,.0f} involuntary switches/s")
    if mhz is not None and median_mhz and abs(drop) >= 0.01:  # a core clock within 1% of the sweep's says nothing
        parts.append(f"core MHz {-drop:+.0%}")
    return [(max(weight, drop), f"CPU contention ({', '.join(parts)})")]


def likely_causes(row: Mapping[str, object], base: Baseline | None = None) -> str:
    """The causes of noise found in one cell's row, most likely first, "; "-joined ("" when none).

    Args:
        row: the cell's columns (a cells-frame row as a mapping); absent columns count as unknown.
        base: what its CPU readings are compared with (None: absolute thresholds only).
    """
    found = _clock_causes(row) + _cpu_cause(row, base or Baseline())
    foreign = _num(row, "foreign_gpu_procs")
    if foreign:
        found.append(
            (FOREIGN_WEIGHT, "foreign GPU process" if foreign == 1 else f"foreign GPU processes ({foreign:.0f})")
        )
    overlapping = _num(row, "overlapping_cells")
    if overlapping:
        found.append((SIDE_BY_SIDE_WEIGHT, f"cells side by side ({overlapping:.0f} overlapping)"))
    return "; ".join(text for _, text in sorted(found, key=lambda f: -f[0]))


def attribute(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` with a ``likely_cause`` column (cells of every sweep loaded compared together)."""
    out = cells.copy()
    base = baseline(out)
    out["likely_cause"] = [likely_causes(row, base) for row in out.to_dict("records")]
    return out


def baseline(cells: pd.DataFrame) -> Baseline:
    """What each cell's CPU readings are compared with: over ``cells`` the median core clock and the
    lower quartile of the wait share (at most :data:`USUAL_WAIT_CAP`), and each configuration's
    quickest run (configurations of two runs or more on one kind of GPU of one host)."""

    def quantile(column: str, q: float) -> float | None:
        values = pd.to_numeric(cells[column], errors="coerce") if column in cells else pd.Series(dtype=float)
        return float(values.quantile(q)) if values.notna().any() else None

    quickest: dict[str, float] = {}
    if {"repeat_group", "cpu_ms_per_step_max"} <= set(cells.columns):
        ms = cells.assign(_ms=pd.to_numeric(cells["cpu_ms_per_step_max"], errors="coerce")).dropna(subset=["_ms"])
        if "status" in ms:
            ms = ms[ms["status"] == "ok"]
        keys = [_config_key(row) for row in ms.to_dict("records")]
        runs = ms.assign(_key=keys).groupby("_key")["_ms"]
        quickest = {str(k): float(v) for k, v in runs.min()[runs.count() >= 2].items()}
    usual = quantile("cpu_wait_share_max", 0.25)
    return Baseline(quantile("core_mhz_min", 0.5), None if usual is None else min(usual, USUAL_WAIT_CAP), quickest)


def _noisy(cells: pd.DataFrame) -> pd.Series:
    """Cells flagged unstable (the pyperf rule, when the rows carry it) or with a cause named."""
    flagged = cells["likely_cause"] != ""
    if "unstable" in cells:
        flagged |= cells["unstable"].fillna(False).astype(bool)
    return flagged


_COLUMNS = [
    Column("label", "cell"),
    Column("mode", "mode"),
    Column("degree", "degree"),
    Column("agg_samples_per_s", "samples/s", lambda v: f"{v:,.0f}"),
    Column("rate_cv", "CV", lambda v: f"{v:.1%}"),
    Column("unstable", "unstable"),
    Column("likely_cause", "likely cause"),
]


def section(cells: pd.DataFrame) -> str:
    """The report's "Why runs were noisy": each unstable or noisy cell with its likely cause."""
    frame = attribute(cells)
    noisy = frame[_noisy(frame)]
    head = "<h2>Why runs were noisy</h2>"
    if noisy.empty:
        return head + '<p class="note">No cell was unstable, and no cause of noise stood out.</p>'
    consts, text = display(noisy, _COLUMNS, keep=["likely_cause"])
    note = (
        f'<p class="note">{len(noisy)} of {len(frame)} cells: flagged unstable, or a cause of noise was measured in '
        "the measured window (GPU clocks held by a cap, training threads waiting for a core more than usual or their "
        "core running slow, other processes on the "
        f"GPU, cells side by side). Thresholds: analysis/attribution.py.</p>"
    )
    return head + note + table_html(text, consts, wrap=["likely cause"])
