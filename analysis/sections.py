"""The sections of ``report.html``, in reading order: findings first, the data dump last.

Each function returns HTML (a string or a list of strings) from the report's tables, verdicts and
figure files (:mod:`analysis.report` puts them together). Figures are matched to their section
by file name (``fig1_gain_<workload>.png`` goes beside the workload's gain table).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.findings import Verdict
from analysis.load import SweepData
from analysis.page import Column, details, display, number, pair, table_html, wide
from raycolloc.mode_kinds import mode_rank

__all__ = ["baseline", "closing", "findings", "gain_note", "mixed", "stability", "simulated_banner", "workloads"]

_RATIO, _S, _PCT, _INT = number(".2f"), number(".2f"), number(".0f"), number(",.0f")
_J = number(".3g")
_GIB = lambda v: f"{v / 1024.0:.2f}"  # noqa: E731 - MiB column shown in GiB


def _slug(text: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(text)).strip("_") or "x"


def _figs(figures: Sequence[Path], *stems: str) -> list[Path]:
    return [p for stem in stems for p in figures if p.stem == stem]


def _short_settings(settings: object) -> str:
    parts = [p for p in str(settings).split() if not p.endswith(("=off", "=False"))]
    return " ".join(parts) or "defaults"


def _short_solo(solo: object) -> object:
    """``mps compile=default`` from ``mps compile=default amp=off channels_last=False`` (None stays None)."""
    if not isinstance(solo, str):
        return solo
    mode, _, settings = solo.partition(" ")
    short = _short_settings(settings)
    return mode if short == "defaults" else f"{mode} {short}"


def simulated_banner(cells: pd.DataFrame) -> str:
    """A warning above everything when any cell ran on the simulated GPU backend (local mode)."""
    sim = cells["backend"].fillna("") == "sim"
    if not sim.any():
        return ""
    return (
        '<div class="banner"><b>Simulated GPUs.</b> '
        f"{int(sim.sum())} of {len(cells)} cells ran in local mode on simulated GPUs (backend <code>sim</code>): "
        "their jobs trained tiny models on the CPU, and SM activity, memory, power and energy are synthesised from "
        "CPU time and allocations. They exercise the pipeline; they say nothing about a real GPU, and their "
        "timings swing between runs (use <code>repeats=N</code>).</div>"
    )


def findings(best: pd.DataFrame, verdicts: Sequence[Verdict]) -> str:
    """The best configuration per workload, then a verdict on each of the study's claims."""
    frame = best.assign(
        config=best["mode"] + " x" + best["degree"].astype(int).astype(str),
        settings=best["settings"].map(_short_settings),
        best_solo=best["best_solo"].map(_short_solo),
        flag=best["gain_uncertain"].map(lambda f: "spread crosses 1" if f else ""),
    )
    consts, text = display(
        frame,
        [
            Column("workload", "workload"),
            Column("gpu_name", "GPU"),
            Column("config", "best configuration"),
            Column("settings", "settings"),
            Column("n_ok", "runs"),
            Column("agg_samples_per_s", "samples/s", _INT),
            Column("gain_vs_solo", "gain vs same settings alone", _RATIO),
            Column("gain_vs_best_solo", "gain vs best solo", _RATIO),
            Column("best_solo", "best solo"),
            Column("energy_vs_solo", "J/sample vs solo", _RATIO),
            Column("flag", "note"),
        ],
        keep=("workload", "config"),
    )
    items = []
    for v in verdicts:
        cls = "v-" + re.sub(r"[^a-z]+", "-", v.verdict.split(" (")[0].lower()).strip("-")
        items.append(
            f'<li><b>{html.escape(v.claim)}</b> — <span class="v {cls}">{html.escape(v.verdict)}</span>: '
            f"{html.escape(v.evidence)}</li>"
        )
    best_html = table_html(text, consts) if not best.empty else '<p class="note">No uniform cell finished ok.</p>'
    return (
        "<h2>Findings</h2><h3>Best configuration per workload</h3>"
        + best_html
        + '<h3>The study\'s claims</h3><ul class="claims">'
        + "".join(items)
        + "</ul>"
    )


def _config_rows(gain: pd.DataFrame) -> pd.DataFrame:
    """The gain table's rows in reading order (degree, then naive, MPS, MIG), with short settings and
    a note on noise."""
    rows = gain.assign(
        settings=gain["settings"].map(_short_settings),
        _o=gain["mode"].map(mode_rank),
        note=[gain_note(r) for _, r in gain.iterrows()],
        stability=[stability(r) for _, r in gain.iterrows()],
    )
    return rows.sort_values(["workload", "degree", "_o", "settings"]).drop(columns="_o")


def gain_note(row: pd.Series) -> str:
    """What to keep in mind reading a configuration's gain: its runs' spread crosses 1, the gain is
    within the noise (its 95% interval crosses 1), or one run only."""
    if row.get("gain_uncertain"):
        return "spread crosses 1"
    if row.get("gain_verdict") == "inconclusive":
        return "gain within noise"
    return "1 run" if row.get("n_ok") == 1 and row.get("degree", 1) > 1 else ""


def stability(row: pd.Series) -> str:
    """``unstable (CV 12%)`` for a configuration whose rate's CV is 10% or more (pyperf's rule)."""
    if not bool(row.get("unstable")) or pd.isna(row.get("unstable")):
        return ""
    cv = row.get("rate_cv")
    return f"unstable (CV {100 * cv:.0f}%)" if pd.notna(cv) else "unstable"


_KEY = [
    Column("mode", "mode"),
    Column("degree", "jobs"),
    Column("settings", "settings"),
    Column("gpu_name", "GPU"),
    Column("n_runs", "runs"),
    Column("status", "status"),
]


def workloads(gain: pd.DataFrame, figures: Sequence[Path]) -> list[str]:
    """Per workload of the uniform cells: gain (Fig. 1), epoch-2 time (Fig. 2), SM activity and
    memory (Figs. 3, 4), energy (Figs. 6, 10), each beside its table; PCIe and power over time."""
    parts = []
    for workload, rows in _config_rows(gain).groupby("workload", sort=True):
        w = _slug(workload)
        keep = ("mode", "degree")
        sub = [f"<h2>{html.escape(str(workload))}</h2>"]
        consts, text = display(
            rows,
            [
                *_KEY,
                Column("agg_samples_per_s", "samples/s", _INT),
                Column("gain_vs_solo", "gain vs solo", _RATIO),
                Column("gain_vs_best_solo", "vs best solo", _RATIO),
                Column("note", "note"),
                Column("stability", "stability"),
            ],
            keep,
        )
        sub += [
            "<h3>Throughput gain (aggregate epoch-2 samples/s against the same settings alone)</h3>",
            pair(_figs(figures, f"fig1_gain_{w}"), table_html(text, consts)),
        ]
        consts, text = display(
            rows,
            [
                *_KEY,
                Column("epoch2_s", "epoch 2 (s)", _S),
                Column("slowdown_mean", "slowdown", _RATIO),
                Column("slowdown_max", "worst job", _RATIO),
            ],
            keep,
        )
        sub += [
            "<h3>Epoch-2 time per job and slowdown against its solo run (Fig. 2)</h3>",
            pair(_figs(figures, f"fig2_epoch2_time_{w}"), table_html(text, consts)),
        ]
        consts, text = display(
            rows,
            [
                *_KEY,
                Column("sm_active_mean", "SM %", _PCT),
                Column("sm_active_max", "SM max %", _PCT),
                Column("mem_used_max_mib", "memory GiB", _GIB),
            ],
            keep,
        )
        sub += [
            "<h3>SM activity and memory (Figs. 3, 4)</h3>",
            pair(_figs(figures, f"fig3_sm_activity_{w}", f"fig4_memory_{w}"), table_html(text, consts)),
        ]
        consts, text = display(
            rows,
            [
                *_KEY,
                Column("power_mean_w", "power W", _INT),
                Column("energy_j", "energy J", number(",.1f")),
                Column("energy_per_sample_j", "J/sample", _J),
                Column("energy_vs_solo", "vs solo", _RATIO),
            ],
            keep,
        )
        sub += [
            "<h3>Energy: per sample, the number a GPU owner pays for (Figs. 6, 10)</h3>",
            pair(_figs(figures, f"fig10_energy_per_sample_{w}", f"fig6_energy_{w}"), table_html(text, consts)),
        ]
        timelines = _figs(figures, f"fig5_pcie_rx_{w}", f"fig7_power_{w}")
        if timelines:
            sub += ["<h3>PCIe and power over time (Figs. 5, 7; first run of each configuration)</h3>", wide(timelines)]
        parts += sub
    return parts


def mixed(table: pd.DataFrame, figures: Sequence[Path]) -> list[str]:
    """Fig. 8 beside the study's Table 2 (total against sequential, one table per mix), each job's
    time and the GPU's use below it, then Fig. 9 per mix and mode."""
    if table.empty:
        return []
    parts = [
        "<h2>Mixed workloads against one job after the other (Fig. 8, Table 2)</h2>",
        '<p class="note">Total: first epoch start to last epoch end, warm-up included. Alone: the job\'s own '
        "solo cell (same mode and settings), at its time per sample for the samples it trained in the mix. "
        "Sequential: the jobs alone, one after the other. Negative change: collocation is faster.</p>",
    ]
    totals, details_ = [], []
    for mix, rows in table.groupby("mix", sort=True):
        rows = rows.dropna(axis=1, how="all")
        rows = rows.assign(note=["change spread crosses 0" if u else "" for u in rows["change_uncertain"]])
        consts, text = display(
            rows,
            [
                Column("mode", "mode"),
                Column("gpu_name", "GPU"),
                Column("n_runs", "runs"),
                Column("status", "status"),
                Column("total_s", "total (s)", _S),
                Column("sequential_s", "sequential (s)", _S),
                Column("change_vs_sequential_pct", "change %", number("+.0f")),
                Column("energy_vs_sequential", "energy vs seq.", _RATIO),
                Column("note", "note"),
            ],
            keep=("mode",),
        )
        totals.append(f"<h3>{html.escape(str(mix))}</h3>" + table_html(text, consts))
        jobs = [c[: -len("_alone_s")] for c in rows.columns if c.endswith("_alone_s")]
        columns = [Column("mode", "mode")]
        for job in jobs:
            columns += [Column(f"{job}_s", f"{job} (s)", _S), Column(f"{job}_alone_s", f"{job} alone (s)", _S)]
        columns += [
            Column("sm_active_mean", "SM %", _PCT),
            Column("sequential_sm_active_mean", "seq. SM %", _PCT),
            Column("mem_used_max_gib", "mem GiB", _S),
            Column("sequential_mem_used_max_gib", "seq. mem GiB", _S),
        ]
        consts, text = display(rows, columns, keep=("mode",))
        details_.append(f"<h3>{html.escape(str(mix))}: time per job and the GPU's use</h3>" + table_html(text, consts))
    parts.append(pair(_figs(figures, "fig8_mixed_total"), "".join(totals)))
    parts += details_
    timelines = [p for p in figures if p.stem.startswith("fig9_")]
    if timelines:
        parts += ["<h3>SM activity and memory over time (Fig. 9; first run of each mix)</h3>", wide(timelines)]
    return parts


def baseline(table: pd.DataFrame, paths: Sequence[str]) -> list[str]:
    """The comparison with ``--baseline`` sweeps (ratios current / baseline)."""
    consts, text = display(
        table,
        [
            Column(c, c.replace("_", " "), _RATIO if c.endswith("ratio") else None)
            for c in (
                "workload",
                "mode",
                "degree",
                "mix",
                "present",
                "status",
                "status_base",
                "agg_ratio",
                "epoch2_ratio",
                "energy_ratio",
            )
        ],
    )
    return [
        "<h2>Comparison with the baseline sweep (current / baseline)</h2>",
        f'<p class="note">Baseline: {html.escape(", ".join(paths))}</p>',
        table_html(text, consts),
    ]


def closing(
    data: SweepData, tables: dict[str, pd.DataFrame], figures: Sequence[Path], skipped: Sequence[str]
) -> list[str]:
    """Failed cells, figures not drawn, environment, sweeps and configuration: the record."""
    parts = ["<h2>Failed cells</h2>"]
    failed = tables["failed_cells"]
    if failed.empty:
        parts.append('<p class="note">None: every cell is ok.</p>')
    else:
        consts, text = display(
            failed,
            [Column(c, c.replace("_", " ")) for c in ("cell_id", "mode", "degree", "status", "reason", "job_errors")],
        )
        parts.append(table_html(text, consts, wrap=("reason", "job errors")))
    if skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in skipped)
        parts.append("<h3>Figures not drawn</h3><ul>" + items + "</ul>")
    consts, text = display(
        tables["environment"],
        [Column("key", "key"), Column("value", "value"), Column("n_cells", "cells")],
        keep=("key", "value"),
    )
    parts += ["<h2>Environment</h2>", table_html(text, consts, wrap=("value",))]
    cells = data.cells
    sweeps = (
        cells.groupby("sweep")
        .agg(cells=("cell_id", "size"), ok=("failed", lambda f: int((~f).sum())), failed=("failed", "sum"))
        .reset_index()
    )
    parts += ["<h2>Sweeps</h2>", table_html(sweeps.astype(str))]
    shared, varying = tables["config_shared"], tables["config_varying"]
    parts += [
        "<h2>Configuration</h2>",
        details(
            f"Keys that vary across cells ({len(varying.columns) - 2} keys, {len(varying)} cells)",
            table_html(varying.fillna("-").astype(str), wrap=tuple(varying.columns)),
        ),
        details(f"Keys shared by every cell ({len(shared)})", table_html(shared.astype(str), wrap=("value",))),
    ]
    return parts
