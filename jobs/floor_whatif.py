"""What-if, on measured runs: a solo baseline's interval and GPU time under other repeat policies.

Every gain divides by a solo baseline, so ``repeats=auto`` runs each solo several times
(``measure.min_solo_repeats``); its repeats warm up as long as the first run took to settle
(``measure.warmup=learned``, :mod:`raycolloc.driver.warmup`) and measure a share of the floor
(``measure.repeat_floor``, :mod:`raycolloc.driver.floor`). Which policy gives the narrowest interval for
the GPU time can be read without a GPU off solo runs that warmed up and measured whole: the epochs table
keeps each epoch's windows (``window_steps``, ``window_s``), so a shorter repeat is one of those runs cut
short. A repeat warms up through the steps the tree's rule (:func:`raycolloc.driver.warmup.learn`) learns
from the policy's first run, then measures its own next windows (the rest of its warm-up epoch, then its
measured epoch) until ``share`` of its measured epoch's seconds and at least an epoch's steps have passed.

For every solo configuration (degree 1, no mix) with at least ``--min-runs`` such runs, and for each
policy of no more runs than it has (``RUNS:SHARE``: the first run whole, the others repeats at that
share), it forms every choice of first run and repeats among the runs and prints the mean and median of
the 95% interval's half-width (the t-interval of the runs' rates,
:func:`raycolloc.results.stats.mean_interval`, as ``repeats=auto`` reads it), the mean GPU seconds of the
solo's runs (warm-up and measured epochs, as ``jobs/check_cost.sh`` counts them), and how far the repeats'
rates moved from the same runs measured whole (a short or early measurement of a rate that still climbs
reads low).

    python jobs/floor_whatif.py DIR [DIR ...] [--policy 3:1 --policy 4:0.5 ...] [--min-runs 4] [--json out.json]

Each DIR is a sweep's output or a corpus folder (corpus/, corpus/passes/<date>/), read on its own.
Runs whose warm-up was learned (fewer samples than a whole epoch's batches) are left out: a repeat is
read off a whole warm-up. A time-budgeted epoch (the corpus's) has no floor: its measured seconds stand
for one. Prints one table per DIR; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from raycolloc.advise.corpus import load_measured  # noqa: E402 (after the path: jobs/ runs from a checkout)
from raycolloc.driver.warmup import learn, listed  # noqa: E402
from raycolloc.results.stats import mean_interval  # noqa: E402

DEFAULT_POLICIES = ("3:1", "4:0.3", "4:1")


@dataclass(frozen=True)
class Policy:
    """A solo's runs: ``runs`` in all, the first whole, the others measuring ``share`` of the floor."""

    runs: int
    share: float

    @property
    def name(self) -> str:
        return f"{self.runs}:{self.share:g}"


@dataclass(frozen=True)
class Run:
    """One solo run measured whole: its windows (steps, seconds) of the warm-up and the measured epoch."""

    warm: tuple[tuple[int, float], ...]
    measured: tuple[tuple[int, float], ...]
    batch: int
    epoch_steps: int  # the fewest steps a measured epoch runs (0: a time-budgeted epoch)
    epochs: tuple[dict[str, Any], ...]  # its epochs table's rows, for the warm-up rule

    @property
    def rate(self) -> float:
        return sum(n for n, _ in self.measured) * self.batch / sum(t for _, t in self.measured)

    @property
    def seconds(self) -> float:
        return sum(t for _, t in self.warm) + sum(t for _, t in self.measured)


@dataclass(frozen=True)
class Row:
    """One solo configuration under one policy."""

    where: str
    configuration: str  # its runs' repeat_group (a sweep's: its first run's config hash)
    label: str  # its first run's cell label
    available: int  # runs measured whole
    policy: str  # RUNS:SHARE
    choices: int  # choices of first run and repeats averaged over
    mean_pm_pct: float
    median_pm_pct: float
    gpu_s: float  # the solo's runs' warm-up and measured seconds, mean over the choices
    with_setup_s: float  # and each run's set-up (its configuration's median)
    rate_change_pct: float  # the repeats' rates against the same runs measured whole (%)


def parse_policy(text: str) -> Policy:
    """``RUNS:SHARE`` (``4:0.5``) as a :class:`Policy`; ValueError on anything else."""
    runs, _, share = text.partition(":")
    policy = Policy(int(runs), float(share or 1))
    if policy.runs < 2 or not 0 < policy.share <= 1:
        raise ValueError(f"--policy {text}: RUNS must be at least 2 and SHARE in (0, 1]")
    return policy


def repeat(run: Run, warm_steps: int, share: float) -> tuple[float, float]:
    """A repeat of ``run``'s configuration read off ``run``: it warms up ``warm_steps`` (whole windows,
    at least that many steps; as the tree does, a whole epoch where that is no fewer than the run's own
    warm-up), then measures its next windows until ``share`` of its measured epoch's seconds (the floor it
    ran) and at least an epoch's steps have passed, or its windows end. Returns its rate (samples/s) and
    its seconds; a whole warm-up and a whole share give ``run`` as measured."""
    whole_warm = sum(n for n, _ in run.warm)
    if warm_steps >= whole_warm:
        if share >= 1:
            return run.rate, run.seconds
        warm_steps = whole_warm
    windows = [*run.warm, *run.measured]
    i = steps = 0
    warm_s = 0.0
    while i < len(windows) and steps < warm_steps:
        steps, warm_s, i = steps + windows[i][0], warm_s + windows[i][1], i + 1
    want_s = share * sum(t for _, t in run.measured)
    kept_steps, kept_s = 0, 0.0
    while i < len(windows) and (kept_s < want_s or kept_steps < run.epoch_steps):
        kept_steps, kept_s, i = kept_steps + windows[i][0], kept_s + windows[i][1], i + 1
    return kept_steps * run.batch / kept_s, warm_s + kept_s


def warm_steps(first: Run) -> int:
    """The steps a repeat warms up by the tree's rule, learned from ``first`` (a whole epoch if it
    teaches nothing)."""
    return learn(first.epochs).steps.get(0, sum(n for n, _ in first.warm))


def evaluate(runs: Sequence[Run], policy: Policy) -> tuple[int, list[float], list[float], list[float]]:
    """Every choice of first run and ``policy.runs - 1`` repeats among ``runs``: the count, each choice's
    relative half-width and GPU seconds, and each repeat's rate change against its run measured whole."""
    widths, seconds, changes = [], [], []
    count = 0
    for first in range(len(runs)):
        steps = warm_steps(runs[first])
        others = [i for i in range(len(runs)) if i != first]
        for chosen in itertools.combinations(others, policy.runs - 1):
            rates, spent = [runs[first].rate], runs[first].seconds
            for i in chosen:
                rate, secs = repeat(runs[i], steps, policy.share)
                rates.append(rate)
                spent += secs
                changes.append(rate / runs[i].rate - 1)
            widths.append(mean_interval(rates).rel_half_width)
            seconds.append(spent)
            count += 1
    return count, widths, seconds, changes


def _pairs(steps: Any, secs: Any) -> tuple[tuple[int, float], ...]:
    return tuple((int(n), float(t)) for n, t in zip(listed(steps), listed(secs), strict=False))


def solo_runs(where: Path) -> dict[str, tuple[str, list[Run], float]]:
    """Each solo configuration's runs measured whole (by repeat), with its first run's label and its runs'
    median set-up (the cells table's ``fixed_s``: a cell's wall time less its epochs)."""
    data = load_measured([where])
    cells, epochs = data.cells, data.epochs
    if "window_s" not in epochs:
        return {}
    solo = cells[(cells["degree"] == 1) & cells["mix"].isna() & (cells["status"] == "ok")].sort_values("repeat")
    jobs = data.jobs.drop_duplicates("cell_id").set_index("cell_id")
    by_cell = {cell: group.sort_values("epoch") for cell, group in epochs.groupby("cell_id")}
    out: dict[str, tuple[str, list[Run], float]] = {}
    for key, group in solo.groupby("repeat_group"):
        floors = [jobs.loc[c].get("min_epoch_s") for c in group["cell_id"] if c in jobs.index]
        floor = max((float(f) for f in floors if pd.notna(f)), default=None)
        runs = []
        for cell in group["cell_id"]:
            rows, job = by_cell.get(cell), jobs.loc[cell] if cell in jobs.index else None
            if rows is None or len(rows) < 2 or job is None:
                continue
            warm, measured = rows.iloc[0], rows.iloc[1]
            batch, budgeted = int(job["batch_size"]), pd.notna(job.get("epoch_time_s"))
            # A learned warm-up (fewer samples than a whole epoch's batches) or a shortened floor (a
            # repeat's share of it) cannot be read as a whole run.
            if not budgeted and int(warm["samples"]) + batch <= int(job["epoch_samples"]):
                continue
            if floor is not None and pd.notna(job.get("min_epoch_s")) and float(job["min_epoch_s"]) < floor:
                continue
            run = Run(
                _pairs(warm["window_steps"], warm["window_s"]),
                _pairs(measured["window_steps"], measured["window_s"]),
                batch,
                0 if budgeted else int(job["epoch_samples"]) // batch,
                tuple(rows.to_dict("records")),
            )
            if run.warm and run.measured and all(t > 0 for _, t in run.warm + run.measured):
                runs.append(run)
        fixed = [float(f) for f in group["fixed_s"] if pd.notna(f)] if "fixed_s" in group else []
        out[str(key)] = (str(group["label"].iloc[0]), runs, statistics.median(fixed) if fixed else 0.0)
    return out


def whatif(where: Path, policies: Sequence[Policy], min_runs: int) -> list[Row]:
    """The rows of one sweep or corpus folder."""
    rows = []
    for key, (label, runs, setup_s) in solo_runs(where).items():
        if len(runs) < min_runs:
            continue
        for policy in (p for p in policies if p.runs <= len(runs)):
            count, widths, seconds, changes = evaluate(runs, policy)
            rows.append(
                Row(
                    where=str(where),
                    configuration=key,
                    label=label,
                    available=len(runs),
                    policy=policy.name,
                    choices=count,
                    mean_pm_pct=round(100 * statistics.fmean(widths), 1),
                    median_pm_pct=round(100 * statistics.median(widths), 1),
                    gpu_s=round(statistics.fmean(seconds), 2),
                    with_setup_s=round(statistics.fmean(seconds) + policy.runs * setup_s, 2),
                    rate_change_pct=round(100 * statistics.fmean(changes), 1) if changes else 0.0,
                )
            )
    return rows


def summarise(table: pd.DataFrame, policies: int) -> None:
    """One line per policy over the configurations every policy was read on (a policy of more runs than
    a configuration has leaves it out of all): mean interval and GPU seconds, and the repeats' rate change
    as its median and range over them (a mean would let opposite moves cancel)."""
    shared = table.groupby("label")["policy"].transform("nunique") == policies
    if not shared.any():
        print("  no configuration was read under every policy")
        return
    common = table[shared]
    print(f"  over the {common['label'].nunique()} configuration(s) read under every policy:")
    for policy, rows in common.groupby("policy", sort=False):
        change = rows["rate_change_pct"]
        print(
            f"  policy {policy}: mean interval ±{rows['mean_pm_pct'].mean():.1f}%, {rows['gpu_s'].mean():.1f} s a"
            f" solo ({rows['with_setup_s'].mean():.1f} s with set-up), repeats' rate median {change.median():+.1f}%"
            f" ({change.min():+.1f}% to {change.max():+.1f}%)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    default = " ".join(DEFAULT_POLICIES)
    parser.add_argument("--policy", action="append", help=f"RUNS:SHARE, repeatable (default {default})")
    parser.add_argument("--min-runs", type=int, default=4, help="a configuration's fewest runs measured whole")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    try:
        policies = [parse_policy(p) for p in (args.policy or DEFAULT_POLICIES)]
    except ValueError as err:
        parser.error(str(err))
    if args.min_runs < 2:
        parser.error(f"--min-runs={args.min_runs} must be at least 2")
    rows: list[Row] = []
    for where in args.dirs:
        found = whatif(where, policies, args.min_runs)
        configurations = len({r.configuration for r in found})
        print(f"{where}: {configurations} solo configurations of {args.min_runs}+ runs measured whole")
        if found:
            table = pd.DataFrame([asdict(r) for r in found]).drop(columns=["where", "configuration"])
            print(table.to_string(index=False))
            summarise(table, len(policies))
        rows += found
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
