"""What-if, on measured runs: had each solo's repeats measured a share of their epoch, would its interval widen?

``measure.repeat_floor`` lets a solo baseline's repeats measure half the floor where the first run held
steady (:mod:`raycolloc.driver.floor`). Whether that widens the intervals the sweep reports can be read
off runs already measured over the whole floor, without a GPU: a measured epoch's windows are kept
(the epochs table's ``window_steps`` and ``window_s``), so a repeat cut to its first ``--share`` of the
epoch's time is its earliest windows. For every solo configuration (degree 1, no mix) with at least
``--min-runs`` ok runs whose measured epoch kept its windows, this prints its 95% interval (the
t-interval of its runs' rates, :func:`raycolloc.results.stats.mean_interval`, as ``repeats=auto``
reads it) from whole repeats and from cut ones (the first run always whole), the first run's drift
(:func:`raycolloc.driver.floor.drift`) and whether it held within the gate's 2% (``drift_ok``: the drift
rule alone; :func:`raycolloc.driver.floor.judge` also refuses runs without a floor, such as the corpus's
time-budgeted epochs).

    python jobs/floor_whatif.py DIR [DIR ...] [--share 0.5] [--min-runs 3] [--json out.json]

Each DIR is a sweep's output or a corpus folder (corpus/, corpus/passes/<date>/), read on its own.
Prints one table and a line per DIR; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.load import SweepData  # noqa: E402 (after the path: jobs/ runs from a checkout)
from raycolloc.advise.corpus import load_measured  # noqa: E402
from raycolloc.driver.floor import DRIFT, MIN_WINDOWS, drift  # noqa: E402
from raycolloc.driver.warmup import listed  # noqa: E402
from raycolloc.results.stats import mean_interval  # noqa: E402


@dataclass(frozen=True)
class Row:
    """One solo configuration: its intervals (relative half-widths, %) from whole and cut repeats."""

    where: str
    configuration: str  # its runs' repeat_group (a sweep's: its first run's config hash)
    label: str  # its first run's cell label
    runs: int
    windows: int
    first_drift_pct: float | None
    drift_ok: bool
    whole_pm_pct: float
    cut_pm_pct: float
    cut_rate_change_pct: float  # the cut repeats' mean rate against their whole epochs' (%)
    saved_s: float  # the measured seconds the cut repeats would not have run


def cut_rate(steps: Sequence[int], secs: Sequence[float], batch: int, share: float) -> tuple[float, float]:
    """The rate (samples/s) of an epoch's earliest windows that end within ``share`` of its time (at
    least one window), and the seconds left out."""
    total, kept_steps, kept_s = sum(secs), 0, 0.0
    for n, t in zip(steps, secs, strict=True):
        if kept_steps and kept_s + t > share * total:
            break
        kept_steps, kept_s = kept_steps + n, kept_s + t
    return kept_steps * batch / kept_s, total - kept_s


def _runs(data: SweepData) -> pd.DataFrame:
    """Per ok solo run with windows: its configuration, repeat, windows and batch size."""
    cells = data.cells
    solo = cells[(cells["degree"] == 1) & cells["mix"].isna() & (cells["status"] == "ok")]
    epochs = data.epochs
    if "window_s" not in epochs:
        return pd.DataFrame()
    measured = epochs[~epochs["warmup"].astype(bool)].sort_values("epoch").groupby("cell_id").head(1)
    jobs = data.jobs[["cell_id", "job_index", "batch_size"]]
    runs = (
        solo[["cell_id", "label", "repeat_group", "repeat"]]
        .merge(measured, on="cell_id")
        .merge(jobs, on=["cell_id", "job_index"])
    )
    runs = runs.assign(steps=runs["window_steps"].map(listed), secs=runs["window_s"].map(listed))
    return runs[runs["secs"].map(lambda secs: len(secs) > 0 and all(float(t) > 0 for t in secs))]


def whatif(where: Path, share: float, min_runs: int) -> list[Row]:
    """The rows of one sweep or corpus folder."""
    rows = []
    for key, group in _runs(load_measured([where])).groupby("repeat_group"):
        group = group.sort_values("repeat")
        if len(group) < min_runs:
            continue
        whole, cut, saved = [], [], 0.0
        for i, run in enumerate(group.itertuples()):
            steps, secs = [int(n) for n in run.steps], [float(t) for t in run.secs]
            whole.append(sum(steps) * int(run.batch_size) / sum(secs))
            rate, left = cut_rate(steps, secs, int(run.batch_size), share) if i else (whole[-1], 0.0)
            cut.append(rate)
            saved += left
        first = group.iloc[0]
        moved = drift(first["steps"], first["secs"])
        rows.append(
            Row(
                where=str(where),
                configuration=str(key),
                label=str(first["label"]),
                runs=len(group),
                windows=len(first["secs"]),
                first_drift_pct=None if moved is None else round(100 * moved, 1),
                drift_ok=moved is not None and abs(moved) <= DRIFT,
                whole_pm_pct=round(100 * mean_interval(whole).rel_half_width, 1),
                cut_pm_pct=round(100 * mean_interval(cut).rel_half_width, 1),
                cut_rate_change_pct=round(100 * (sum(cut[1:]) / sum(whole[1:]) - 1), 1),
                saved_s=round(saved, 2),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--share", type=float, default=0.5, help="the share of the epoch a repeat measures")
    parser.add_argument("--min-runs", type=int, default=3, help="a configuration's fewest runs")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    if not 0 < args.share <= 1 or args.min_runs < 2:
        parser.error(f"--share={args.share} must be in (0, 1] and --min-runs={args.min_runs} at least 2")
    rows: list[Row] = []
    for where in args.dirs:
        found = whatif(where, args.share, args.min_runs)
        wider = sum(r.cut_pm_pct > r.whole_pm_pct for r in found)
        gated = sum(r.drift_ok for r in found)
        print(
            f"{where}: {len(found)} solo configurations of {args.min_runs}+ runs with windows; cut repeats widen "
            f"{wider} of them; {gated} first run(s) drifted within {100 * DRIFT:g}% over {MIN_WINDOWS}+ windows"
        )
        if found:
            print(
                pd.DataFrame([asdict(r) for r in found]).drop(columns=["where", "configuration"]).to_string(index=False)
            )
        rows += found
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
