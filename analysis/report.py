"""The report CLI: tables as CSV, figures as PNG, and one self-contained ``report.html``.

Usage::

    python -m analysis.report SWEEP_DIR [SWEEP_DIR ...] --out DIR [--baseline OTHER_SWEEP_DIR]

The HTML embeds every figure as a base64 PNG and every table as HTML, with inline CSS and no
scripts, so it reads offline and can be mailed as one file. The throughput-gain table is also
printed to stdout.
"""

from __future__ import annotations

import argparse
import base64
import html
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis.figures import make_figures
from analysis.load import SweepData, load_sweeps
from analysis.meta import config_tables, environment_table, failed_cells_table
from analysis.tables import baseline_table, cell_metrics_table, epoch2_table, gain_table, mixed_table

__all__ = ["Report", "build_report", "build_tables", "format_gain", "main", "render_html"]

log = logging.getLogger(__name__)

GAIN_COLUMNS = ["workload", "gpu_name", "mode", "degree", "settings", "status", "agg_samples_per_s",
                "gain_vs_solo", "gain_vs_best_solo", "best_solo", "slowdown_mean", "slowdown_max"]
_BAD_STATUS = ("oom", "error", "partial")
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1400px;
padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;font-size:.82em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f3f3f3;position:sticky;top:0}td:first-child,th:first-child{text-align:left}
tr:nth-child(even) td{background:#fafafa}td.bad{color:#b00;font-weight:600}
.scroll{overflow-x:auto}figure{display:inline-block;margin:.5em 1em .5em 0}
figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
.note{color:#555;font-size:.9em}code{background:#f3f3f3;padding:0 .2em}
"""

_TABLE_TITLES = {
    "gain": "Throughput gain of collocation (aggregate epoch-2 samples/s)",
    "epoch2": "Epoch-2 time per job and slowdown vs solo (Fig. 2)",
    "cell_metrics": "SM activity, memory, energy and power per cell (Figs. 3, 4, 6)",
    "mixed": "Mixed workloads: total time vs sequential (Fig. 8, Table 2)",
    "baseline": "Comparison with the baseline sweep (ratios current / baseline)",
}


@dataclass
class Report:
    """What the CLI produced: the tables, the figure files and the skipped figures."""

    tables: dict[str, pd.DataFrame]
    figures: list[Path]
    skipped: list[str] = field(default_factory=list)
    html_path: Path | None = None


def build_tables(data: SweepData, baseline: SweepData | None = None) -> dict[str, pd.DataFrame]:
    """Every table of the report, by name (also the CSV file stem)."""
    tables = {
        "gain": gain_table(data.cells, data.jobs),
        "epoch2": epoch2_table(data.cells, data.jobs),
        "cell_metrics": cell_metrics_table(data.cells, data.epochs),
        "mixed": mixed_table(data.cells, data.jobs, data.epochs),
        "failed_cells": failed_cells_table(data.cells, data.jobs),
        "environment": environment_table(data.cells),
    }
    tables["config_shared"], tables["config_varying"] = config_tables(data.cells)
    if baseline is not None:
        tables["baseline"] = baseline_table(data.cells, data.jobs, baseline.cells, baseline.jobs)
    return tables


def _fmt(value: float) -> str:
    """Numbers for people: thousands separators for big ones, three decimals for small ones."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1e7:
        return f"{value:.3e}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3f}"


def format_gain(gain: pd.DataFrame) -> str:
    """The gain table as fixed-width text (the stdout summary)."""
    if gain.empty:
        return "no uniform cells: no throughput-gain table"
    cols = [c for c in GAIN_COLUMNS if c != "settings" or gain["settings"].nunique() > 1]
    if gain["gpu_name"].nunique() <= 1:
        cols.remove("gpu_name")
    floats = gain[cols].select_dtypes("number").columns.difference(["degree"])
    return gain[cols].to_string(index=False, na_rep="-", formatters={c: _fmt for c in floats})


def _table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return '<p class="note">(no rows)</p>'
    floats = list(frame.select_dtypes("floating").columns)
    text = frame.to_html(index=False, na_rep="-", escape=True, border=0, formatters={c: _fmt for c in floats})
    for status in _BAD_STATUS:
        text = text.replace(f"<td>{status}</td>", f'<td class="bad">{status}</td>')
    return f'<div class="scroll">{text}</div>'


def _figure_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.stem)
    return (f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>{name}</figcaption></figure>")


def _sweeps_html(data: SweepData) -> str:
    cells = data.cells
    rows = cells.groupby("sweep").agg(cells=("cell_id", "size"), ok=("failed", lambda f: int((~f).sum())),
                                      failed=("failed", "sum"), first_cell_dir=("cell_dir", "min")).reset_index()
    return _table_html(rows)


def render_html(data: SweepData, tables: dict[str, pd.DataFrame], figures: Sequence[Path],
                skipped: Sequence[str] = (), baseline_paths: Sequence[str] = ()) -> str:
    """The whole report as one HTML document (figures inlined, no external resources)."""
    esc = html.escape
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    n_failed = int(data.cells["failed"].sum())
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>raycolloc report: {esc(', '.join(data.sweeps))}</title><style>{_CSS}</style></head><body>",
        "<h1>raycolloc collocation report</h1>",
        f'<p class="note">Generated {stamp}. {len(data.cells)} cells ({n_failed} failed), {len(data.jobs)} jobs, '
        f"{len(data.telemetry)} telemetry samples. Metric: epoch 2 (epoch 1 is warm-up).</p>",
        "<h2>Sweeps</h2>", _sweeps_html(data),
    ]
    if baseline_paths:
        parts.append(f'<p class="note">Baseline: {esc(", ".join(baseline_paths))}</p>')
    parts += ["<h2>Environment</h2>", _table_html(tables["environment"])]
    parts += ["<h2>Failed cells</h2>",
              _table_html(tables["failed_cells"]) if n_failed else '<p class="note">None: every cell is ok.</p>']
    for name in ("gain", "epoch2", "cell_metrics", "mixed", "baseline"):
        if name in tables:
            parts += [f"<h2>{esc(_TABLE_TITLES[name])}</h2>", _table_html(tables[name])]
    parts.append("<h2>Figures</h2>")
    parts += [_figure_html(p) for p in figures] or ['<p class="note">No figures.</p>']
    if skipped:
        parts.append("<h3>Figures not drawn</h3><ul>" + "".join(f"<li>{esc(s)}</li>" for s in skipped) + "</ul>")
    parts += ["<h2>Configuration</h2>", "<h3>Keys that vary across cells</h3>", _table_html(tables["config_varying"]),
              "<h3>Keys shared by every cell</h3>", _table_html(tables["config_shared"]), "</body></html>"]
    return "\n".join(parts)


def build_report(sweeps: Sequence[str | Path], out_dir: str | Path,
                 baseline: Sequence[str | Path] = ()) -> Report:
    """Load the sweeps, write CSVs, PNGs and report.html into ``out_dir``.

    Raises:
        SystemExit: a sweep or baseline directory is missing or holds no raycolloc cells.
    """
    data = load_sweeps(sweeps)
    base = load_sweeps(baseline) if baseline else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = build_tables(data, base)
    for name, frame in tables.items():
        frame.to_csv(out / f"{name}.csv", index=False)
    skipped: list[str] = []
    figures = make_figures(data, out, skipped)
    page = render_html(data, tables, figures, skipped, [str(b) for b in baseline])
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    log.info("report=%s figures=%d tables=%d skipped=%d", html_path, len(figures), len(tables), len(skipped))
    return Report(tables=tables, figures=figures, skipped=skipped, html_path=html_path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP_DIR",
                        help="sweep directories (results/multirun/<date>/<time>), searched recursively for cells")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory for report.html, PNGs, CSVs")
    parser.add_argument("--baseline", action="append", default=[], metavar="OTHER_SWEEP_DIR",
                        help="a sweep to compare against, joined on workload, mode, degree, mix (repeatable)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    report = build_report(args.sweeps, args.out, args.baseline)
    print(_TABLE_TITLES["gain"])
    print(format_gain(report.tables["gain"]))
    n_failed = len(report.tables["failed_cells"])
    if n_failed:
        print(f"\n{n_failed} failed cell(s): see failed_cells.csv")
    print(f"\nreport: {report.html_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
