"""The short table printed after each cell, and the sweep's summary after the last."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycolloc.results.rows import CellRow, JobRow
from raycolloc.results.stats import bounds, fmt_pm
from raycolloc.results.summary_tables import gain_lines, mix_lines, read_runs
from raycolloc.workload_kinds import ScriptWorkload

if TYPE_CHECKING:
    from raycolloc.driver.engine import CellResult

__all__ = ["cell_summary", "conditions_lines", "print_sweep_summary", "sweep_tables"]

log = logging.getLogger("raycolloc")


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _rate(cell: CellRow) -> str:
    """The aggregate with its within-run interval where the row has one (``12,345 ±2.1%``)."""
    if cell.agg_samples_per_s is None:
        return "-"
    found = bounds(cell.agg_samples_per_s, cell.agg_rate_low, cell.agg_rate_high)
    return fmt_pm(found, ",.0f")


def cell_summary(cell: CellRow, jobs: Sequence[JobRow]) -> str:
    """A few lines: the cell's aggregate, then one line per job."""
    if cell.mix is None:
        rate = f"aggregate={_rate(cell)} samples/s  energy={_fmt(cell.energy_per_sample_j, '.3g')} J/sample"
    else:  # a mix's samples are unlike: its headline is its total time (against serial: the sweep's summary)
        rate = f"total={_fmt(cell.total_s, ',.2f')} s  energy={_fmt(cell.total_energy_j, ',.1f')} J"
    head = (
        f"cell {cell.cell_id}  status={cell.status}  gpu={cell.gpu_name or '-'}  {rate}  "
        f"sm_active={_fmt(cell.sm_active_mean, '.1f')}%  mem_max={_fmt(cell.mem_used_max_mib)} MiB  "
        f"telemetry={cell.telemetry_source}"
    )
    width = max([28, *(len(j.job_name) + 2 for j in jobs)])
    lines = [head, f"  {'job':<{width}}{'status':<8}{'epoch2 s':>10}{'samples/s':>12}{'peak MiB':>10}  note"]
    for j in jobs:
        note = (j.error or "")[:80]
        if j.kind == ScriptWorkload.kind:  # the row's kind column, as the script kind wrote it
            # Measured from outside: its life and exit (peak MiB: what NVML saw of its process).
            note = f"script, exit {_fmt(j.exit_code, 'd')} after {_fmt(j.total_s, '.1f')} s {note}"
        if j.mig_uuid:
            note = f"{j.mig_profile} {j.mig_uuid[:12]}… {note}"
        elif j.mps_client:
            note = f"MPS client of {j.mps_server_pid} {note}"
        # PyTorch's peak where it has one (CUDA); else what the device attributed to the process.
        peak = j.peak_mem_allocated_mib if j.peak_mem_allocated_mib is not None else j.peak_device_mem_mib
        lines.append(
            f"  {j.job_name:<{width}}{j.status:<8}{_fmt(j.epoch2_s, '.2f'):>10}"
            f"{_fmt(j.epoch2_samples_per_s):>12}{_fmt(peak):>10}  {note}"
        )
    if cell.reason and cell.status != "ok":
        lines.append(f"  reason: {cell.reason[:300]}")
    return "\n".join(lines)


def sweep_tables(cell_dirs: Iterable[Path]) -> list[str]:
    """The sweep's tables as lines: the cells' count, the gain table of the uniform cells and the
    mixes against one job after the other (every number ``value ±half-width%``, 95%)."""
    runs = read_runs(cell_dirs)
    n_ok = sum(r.ok for r in runs)
    lines = [f"{len(runs)} cells, {n_ok} ok"]
    gains = gain_lines(runs)
    if gains:
        lines += [
            "throughput gain (gain_vs_solo: same settings at degree 1; gain_vs_best_solo: fastest degree-1 "
            f"configuration of the workload in the sweep; ±: 95% interval, {_HOW})",
            *gains,
        ]
    mixes = mix_lines(runs)
    if mixes:
        lines += [
            "mixed cells against their jobs run one after the other (vs sequential: change of the total time, "
            "negative is faster; note: each job's time collocated/alone in s, first run)",
            *mixes,
        ]
    return lines


# How the ± was formed, said once under the table's title.
_HOW = "across runs the t-interval of the runs, for one run its epochs timed in windows"


def print_sweep_summary(sweep_dir: Path, results: Sequence[CellResult]) -> None:
    """The sweep's summary after its last cell: :func:`sweep_tables` under the sweep's directory."""
    try:
        lines = sweep_tables(r.cell_dir for r in results)
    except Exception as exc:  # noqa: BLE001 - the summary is a convenience; the results are on disk
        log.warning("sweep summary unavailable: %s", exc)
        return
    print(f"\nsweep {sweep_dir}: {lines[0]}")
    for line in [*conditions_lines([r.row for r in results if r.row is not None]), *lines[1:]]:
        print(line)


def conditions_lines(rows: Sequence[CellRow]) -> list[str]:
    """Under what conditions the cells run here measured: the cores kept for the node's own processes
    (one line) and whether cells measured side by side on a node (one line); none without cells."""
    ran = [r for r in rows if r.overlapping_cells is not None]
    if not ran:
        return []
    kept = sorted({f"{r.reserved_cpus} on {r.hostname or r.node_id or '?'}" for r in ran if r.reserved_cpus})
    lines = [
        f"quiet cores: {', '.join(kept)} kept for Ray, the driver and the steward; no job ran there"
        if kept
        else "quiet cores: none reserved (cluster.reserved_cpus=none, or a node under 4 cores): Ray, the driver "
        "and the steward shared the jobs' cores"
    ]
    beside = [r for r in ran if r.overlapping_cells]
    if any(r.isolated for r in ran):
        lines.append("side by side: none; each node measured one cell at a time (cluster.isolate_measurement=true)")
    elif beside:
        most = max(r.overlapping_cells or 0 for r in beside)
        lines.append(
            f"side by side: {len(beside)} of {len(ran)} cells measured while other cells of their node did (up to "
            f"{most} others); for numbers taken alone: cluster.isolate_measurement=true"
        )
    else:
        lines.append("side by side: none; no cell measured while another of its node did")
    return lines
