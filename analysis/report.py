"""The report CLI: tables as CSV, figures as PNG, and one self-contained ``report.html``.

Usage::

    python -m analysis.report SWEEP_DIR [SWEEP_DIR ...] --out DIR [--baseline OTHER_SWEEP_DIR]

The page leads with what the sweeps found (the best configuration per workload, a verdict on each
of the study's claims with its numbers), then per workload each figure beside the table it draws,
then the mixed workloads (Fig. 8 beside Table 2); failed cells, the environment (raycolloc's
version and commit), the sweeps and their configuration come last. Results from simulated GPUs
carry a banner. Figures are inlined PNGs, CSS is inline, there are no scripts: it reads offline and
can be mailed as one file. The gain table is also printed to stdout.
"""

from __future__ import annotations

import argparse
import html
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis import attribution, sections
from analysis.findings import Verdict, best_configs, claims
from analysis.gains import gain_table
from analysis.intervals import pm_text
from analysis.load import SweepData, SweepDirError, load_sweeps
from analysis.meta import config_tables, environment_table, failed_cells_table
from analysis.mixed import mixed_table, table2
from analysis.page import CSS
from analysis.tables import baseline_table, cell_metrics_table, epoch2_table

__all__ = ["Report", "build_report", "build_tables", "format_gain", "main", "render_html"]

log = logging.getLogger(__name__)

# How the report's ± is formed, said once in its header (docs/architecture.md, "How sure").
HOW_SURE = (
    "±: the 95% interval's half-width — over several runs the t-interval of the runs (each ratio's run "
    "against the reference run of the same repeat), for one run its epochs timed in windows; ratios "
    "propagate numerator's and reference's intervals; no bound goes past what its quantity can be (a rate, "
    "time, gain or energy below 0, a change below -100%): held there, the interval shows its two sides "
    "(+120%/-100%); a claim whose interval crosses its threshold is inconclusive; unstable: CV of 10% or more "
    "(pyperf's rule)"
)

GAIN_COLUMNS = [
    "workload",
    "gpu_name",
    "mode",
    "degree",
    "settings",
    "status",
    "n_runs",
    "agg_samples_per_s",
    "gain_vs_solo",
    "gain_vs_best_solo",
    "best_solo",
    "slowdown_mean",
    "slowdown_max",
    "energy_per_sample_j",
    "energy_vs_solo",
]


@dataclass
class Report:
    """What the CLI produced: the tables, the verdicts, the figure files and the skipped figures."""

    tables: dict[str, pd.DataFrame]
    verdicts: list[Verdict]
    figures: list[Path]
    skipped: list[str] = field(default_factory=list)
    html_path: Path | None = None


def build_tables(data: SweepData, baseline: SweepData | None = None) -> dict[str, pd.DataFrame]:
    """Every table of the report, by name (also the CSV file stem)."""
    mixed = mixed_table(data.cells, data.jobs, data.epochs)
    tables = {
        "gain": gain_table(data.cells, data.jobs),
        "epoch2": epoch2_table(data.cells, data.jobs),
        "cell_metrics": cell_metrics_table(data.cells, data.epochs),
        "mixed": mixed,
        "table2": table2(mixed),
        "failed_cells": failed_cells_table(data.cells, data.jobs),
        "environment": environment_table(data.cells),
    }
    tables["best"] = best_configs(tables["gain"])
    tables["config_shared"], tables["config_varying"] = config_tables(data.cells)
    if baseline is not None:
        tables["baseline"] = baseline_table(data.cells, data.jobs, baseline.cells, baseline.jobs)
    return tables


def _verdicts(tables: dict[str, pd.DataFrame]) -> list[Verdict]:
    return claims(tables["gain"], tables["epoch2"], tables["mixed"], tables["table2"])


def format_gain(gain: pd.DataFrame) -> str:
    """The gain table as fixed-width text (stdout): each number ``value ±half-width%`` (95%) where a
    spread is known, then ``[min-max]`` of several runs."""
    if gain.empty:
        return "no uniform cells: no throughput-gain table"
    cols = [c for c in GAIN_COLUMNS if c != "settings" or gain["settings"].nunique() > 1]
    for constant in ("gpu_name", "n_runs", "best_solo"):
        if gain[constant].nunique(dropna=False) <= 1:
            cols.remove(constant)
    text = gain[cols].copy().astype(object)
    for column in cols:
        if f"{column}_min" in gain:
            fmt = (
                "{:,.0f}"
                if column == "agg_samples_per_s"
                else "{:.3g}"
                if column.startswith("energy_per")
                else "{:.2f}"
            )
            text[column] = [
                _spread_text(m, lo, hi, fmt, pm_text(m, a, b))
                for m, lo, hi, a, b in zip(
                    gain[column],
                    gain[f"{column}_min"],
                    gain[f"{column}_max"],
                    gain.get(f"{column}_low", gain[column] * float("nan")),
                    gain.get(f"{column}_high", gain[column] * float("nan")),
                    strict=True,
                )
            ]
        elif column.startswith("slowdown"):
            low, high = gain.get(f"{column}_low"), gain.get(f"{column}_high")
            text[column] = [
                "-" if pd.isna(v) else f"{v:.2f} {pm_text(v, lo, hi)}".rstrip()
                for v, lo, hi in zip(
                    gain[column],
                    low if low is not None else [None] * len(gain),
                    high if high is not None else [None] * len(gain),
                    strict=True,
                )
            ]
    text["note"] = [", ".join(filter(None, (sections.gain_note(r), sections.stability(r)))) for _, r in gain.iterrows()]
    return text.to_string(index=False, na_rep="-")


def _spread_text(median: float, low: float, high: float, fmt: str, pm: str = "") -> str:
    if pd.isna(median):
        return "-"
    text = f"{fmt.format(median)} {pm}".rstrip()
    if pd.isna(low) or pd.isna(high) or abs(high - low) < 1e-12:
        return text
    return f"{text} [{fmt.format(low)}-{fmt.format(high)}]"


def render_html(
    data: SweepData,
    tables: dict[str, pd.DataFrame],
    verdicts: Sequence[Verdict],
    figures: Sequence[Path],
    skipped: Sequence[str] = (),
    baseline_paths: Sequence[str] = (),
) -> str:
    """The whole report as one HTML document (figures inlined, no external resources)."""
    esc = html.escape
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cells = data.cells
    n_failed = int(cells["failed"].sum())
    runs = cells.groupby("repeat_group").size()
    repeats = f"{runs.min()}" if runs.min() == runs.max() else f"{runs.min()}-{runs.max()}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>raycolloc report: {esc(', '.join(data.sweeps))}</title><style>{CSS}</style></head><body>",
        "<h1>raycolloc collocation report</h1>",
        f'<p class="note">{esc(", ".join(data.sweeps))} · {len(cells)} cells ({n_failed} failed) · {runs.size} '
        f"configurations, {repeats} run(s) each · metric: epoch 2 (epoch 1 is warm-up) · a configuration's runs "
        f"are shown as median (min–max) · {esc(HOW_SURE)} · generated {stamp}</p>",
        sections.simulated_banner(cells),
        sections.findings(tables["best"], verdicts),
    ]
    parts += sections.workloads(tables["gain"], figures)
    parts += sections.mixed(tables["table2"], figures)
    if "baseline" in tables:
        parts += sections.baseline(tables["baseline"], baseline_paths)
    parts.append(attribution.section(cells))  # why runs were noisy: each noisy cell's likely cause
    parts += sections.closing(data, tables, figures, skipped)
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def build_report(sweeps: Sequence[str | Path], out_dir: str | Path, baseline: Sequence[str | Path] = ()) -> Report:
    """Load the sweeps, write CSVs, PNGs and report.html into ``out_dir``.

    Raises:
        SweepDirError: a sweep or baseline directory is missing or holds no readable raycolloc cell.
    """
    data = load_sweeps(sweeps)
    base = load_sweeps(baseline) if baseline else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = build_tables(data, base)
    verdicts = _verdicts(tables)
    for name, frame in tables.items():
        frame.to_csv(out / f"{name}.csv", index=False)
    pd.DataFrame([vars(v) for v in verdicts]).to_csv(out / "claims.csv", index=False)
    skipped: list[str] = []
    from analysis.figures import make_figures  # matplotlib: only for a report, not the sweep's summary

    figures = make_figures(data, out, skipped)
    page = render_html(data, tables, verdicts, figures, skipped, [str(b) for b in baseline])
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    log.info("report=%s figures=%d tables=%d skipped=%d", html_path, len(figures), len(tables), len(skipped))
    return Report(tables=tables, verdicts=verdicts, figures=figures, skipped=skipped, html_path=html_path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.splitlines()[0])
    parser.add_argument(
        "sweeps",
        nargs="+",
        metavar="SWEEP_DIR",
        help="sweep directories (results/multirun/<date>/<time>), searched recursively for cells",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory for report.html, PNGs, CSVs")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="OTHER_SWEEP_DIR",
        help="a sweep to compare against, joined on workload, mode, degree, mix (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2: a sweep directory that is missing, empty or corrupt)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    try:
        report = build_report(args.sweeps, args.out, args.baseline)
    except SweepDirError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("Throughput gain of collocation (aggregate epoch-2 samples/s; median [min-max] of a configuration's runs)")
    print(format_gain(report.tables["gain"]))
    print("\nThe study's claims")
    for v in report.verdicts:
        print(f"- {v.claim}: {v.verdict.upper()}. {v.evidence}")
    n_failed = len(report.tables["failed_cells"])
    if n_failed:
        print(f"\n{n_failed} failed cell(s): see failed_cells.csv")
    print(f"\nreport: {report.html_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
