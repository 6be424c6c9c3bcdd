"""``+dry_run=true``: print what a sweep or a plan would do, and do none of it.

Each cell it would run (label, mode, where it would run, each job's workload), each it would reuse
(a valid result with the same config hash where a real run would find it: in the sweep's own
directory, under ``out_dir`` or in an earlier sweep's directory ``out_dir``'s index lists; resume), each it would
refuse (a
config error, with the reason). Validation is the same as a real run's, so what a dry run accepts
a real run accepts; it does not connect to Ray, so checks against the cluster itself (MIG support
and layouts on the GPUs there, a GPU model it lacks) happen when the sweep starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raycolloc.spec import CellSpec, JobSpec

__all__ = ["DryRunLine", "describe_job", "print_dry_run"]

NOT_CHECKED = (
    "not checked against the cluster: the dry run does not connect to Ray; GPU models, MIG "
    "support and layouts are checked when the sweep starts (a cell the cluster cannot run is "
    "then a skipped row)"
)


@dataclass(frozen=True)
class DryRunLine:
    """One cell of a dry run: a validated cell (with where it would run), or a refused one."""

    name: str
    cell: CellSpec | None = None
    where: str = "any free GPU of the cluster"
    refused: str | None = None


def describe_job(job: JobSpec) -> str:
    """One job as a line: what it trains and how much (or the command it runs), as its kind tells it."""
    return job.workload.describe(job)


def print_dry_run(lines: Sequence[DryRunLine], out_dir: str, rerun: bool = False, sweep_dir: Path | None = None) -> int:
    """Print the dry run; returns how many cells were refused. ``sweep_dir``: where the sweep would
    write (its earlier results there are reused, as a real run reuses them)."""
    from raycolloc.results.index import ResultIndex  # pyarrow: only where results are looked up

    also = [sweep_dir] if sweep_dir is not None else []
    index = None if rerun else ResultIndex(out_dir, repair=False, also=also)  # a dry run renames nothing
    counts = {"run": 0, "reuse": 0, "refuse": 0}
    print(f"dry run: nothing runs, no GPU state changes (results under {out_dir})")
    for line in lines:
        if line.refused is not None:
            counts["refuse"] += 1
            print(f"  refuse {line.name}: {line.refused}")
            continue
        cell = line.cell
        assert cell is not None
        found = index.find(cell.config_hash) if index is not None else None
        if found is not None:
            counts["reuse"] += 1
            print(
                f"  reuse  {cell.label}: result in {found.path} (status={found.status}, config hash "
                f"{cell.config_hash}); +rerun=true runs it again"
            )
            continue
        counts["run"] += 1
        print(f"  run    {cell.label}  mode={cell.mode}  jobs={cell.degree}  gpu: {line.where}  (cell {cell.cell_id})")
        for job in cell.jobs:
            print(f"           {describe_job(job)}")
    auto = [line.cell.config for line in lines if line.cell is not None and line.cell.config.repeats == "auto"]
    if auto:
        m = auto[0].measure
        print(
            f"repeats=auto: adaptive; each configuration's first run is listed. Degree-1 cells (the baselines) "
            f"run {m.min_solo_repeats} times, spread over the sweep{_shorter(m.repeat_floor)}; a configuration "
            f"whose 95% interval is "
            f"wider than ±{100 * m.target_ci:g}% runs again, up to {m.max_repeats} runs (repeats=N: exactly N)"
        )
    print(
        f"dry run: {counts['run']} cell(s) to run, {counts['reuse']} to reuse, {counts['refuse']} refused; "
        f"{NOT_CHECKED}",
        flush=True,
    )
    return counts["refuse"]


def _shorter(share: float) -> str:
    """What a solo's repeats measure, where not the whole floor."""
    return f" (the repeats over {share:g} of the floor)" if share < 1 else ""
