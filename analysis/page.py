"""HTML building blocks of ``report.html``: tables people can read and figures beside them.

A report table shows a few columns under short labels, each number formatted for its unit, a
configuration's runs as ``median (min–max)``. Columns whose value is the same in every row (the
GPU model, ``compile=off amp=off channels_last=False``) leave the table for one line above it, so
tables fit a 1400 px window; a table that is still wider than its box scrolls inside the box (every
table sits in a ``div.scroll``), and the page itself never scrolls sideways. Timelines (many panels,
thin lines) take the page's full width at their own pixel size, never shrunk into a thumbnail.
Everything is inline (CSS, base64 PNGs): the page reads offline.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.intervals import pm_text
from analysis.run_spread import fmt_spread

__all__ = ["CONTENT_PX", "CSS", "Column", "details", "display", "figure_html", "number", "pair", "table_html", "wide"]

BAD_STATUS = ("oom", "error", "partial", "unfit", "skipped")
CONTENT_PX = 1368  # the body's width at most (1400 px less its 1em padding each side): a wide figure's pixel width

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.5em auto;max-width:1400px;
padding:0 1em;color:#222;box-sizing:border-box}p,li{overflow-wrap:anywhere}
.scroll{max-width:100%;overflow-x:auto;margin:.3em 0}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
h3{margin:1.2em 0 .4em}
table{border-collapse:collapse;font-size:.8em;margin:.3em 0}
th,td{border:1px solid #ddd;padding:.2em .45em;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f3f3f3;white-space:normal}td:first-child,th:first-child{text-align:left}
tr:nth-child(even) td{background:#fafafa}td.bad{color:#b00;font-weight:600}
td.text{text-align:left;white-space:normal;overflow-wrap:break-word}
.pair{display:flex;gap:1.2em;align-items:flex-start;flex-wrap:wrap;margin:.6em 0}
.pair .figs{flex:0 0 560px;display:flex;flex-direction:column;gap:.4em}
.pair .tab{flex:1 1 560px;min-width:0;overflow-x:auto}
figure{margin:0}figure img{width:100%;border:1px solid #eee}figcaption{font-size:.8em;color:#555}
.wide{display:flex;flex-direction:column;gap:1em;margin:.6em 0}.wide figure img{width:auto;max-width:100%;height:auto}
.note{color:#555;font-size:.88em;margin:.2em 0}.consts{color:#444;font-size:.85em;margin:.2em 0 .3em}
.banner{background:#fff4d6;border:1px solid #e0b84c;padding:.6em .9em;margin:.8em 0;border-radius:4px}
ul.claims{padding-left:1.2em}ul.claims li{margin:.45em 0}
.v{font-weight:600;padding:0 .35em;border-radius:3px}.v-supported{background:#dff3df}
.v-not-supported{background:#f8dcdc}.v-partly{background:#fbf0cc}.v-inconclusive{background:#fbf0cc}
.v-not-enough-data{background:#e8e8e8}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}code{background:#f3f3f3;padding:0 .2em}
"""


def number(spec: str) -> Callable[[float], str]:
    """A formatter ``value -> text`` for a format spec (``".2f"``, ``",.0f"``, ``".3g"``)."""
    return lambda value: format(value, spec)


def _plain(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


@dataclass(frozen=True)
class Column:
    """One displayed column: its source column, short label and number format (None: as text)."""

    source: str
    label: str
    fmt: Callable[[float], str] | None = None


def display(frame: pd.DataFrame, columns: Sequence[Column], keep: Sequence[str] = ()) -> tuple[str, pd.DataFrame]:
    """The columns of ``frame`` as text for a report table, and the line of constant values.

    A column with ``<source>_min``/``<source>_max`` beside it shows ``median (min–max)``; one with
    ``<source>_low``/``<source>_high`` gets a column ``<label> ±`` after it (``±2.4%``: the 95%
    interval's half-width, blank where no spread is known). A column
    whose text is the same in every row (and not in ``keep``) moves to the returned line as
    ``label: value``, unless the table has one row.
    """
    out = pd.DataFrame(index=frame.index)
    for col in columns:
        if col.source not in frame:
            continue
        fmt = col.fmt or _plain
        if col.fmt is not None and f"{col.source}_min" in frame and f"{col.source}_max" in frame:
            out[col.label] = [
                fmt_spread(m, lo, hi, fmt)
                for m, lo, hi in zip(
                    frame[col.source], frame[f"{col.source}_min"], frame[f"{col.source}_max"], strict=True
                )
            ]
        else:
            out[col.label] = [fmt(v) if col.fmt is not None and _number(v) else _plain(v) for v in frame[col.source]]
        if f"{col.source}_low" in frame and f"{col.source}_high" in frame:
            out[f"{col.label} ±"] = [
                pm_text(v, lo, hi)
                for v, lo, hi in zip(
                    frame[col.source], frame[f"{col.source}_low"], frame[f"{col.source}_high"], strict=True
                )
            ]
    consts = []
    if len(out) > 1:
        labels = {c.label for c in columns if c.source in keep}
        for label in list(out.columns):
            values = out[label].unique()
            if len(values) == 1 and label not in labels:
                if values[0] not in ("-", ""):
                    consts.append(f"{label}: {values[0]}")
                out = out.drop(columns=label)
    return " · ".join(consts), out.reset_index(drop=True)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(float(value))


def table_html(text: pd.DataFrame, consts: str = "", wrap: Sequence[str] = ()) -> str:
    """A display frame (from :func:`display`) as HTML; ``wrap`` columns may break lines."""
    if text.empty:
        return '<p class="note">(no rows)</p>'
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in text.columns)
    rows = []
    for _, row in text.iterrows():
        cells = []
        for column, value in row.items():
            value = str(value)
            bad = value in BAD_STATUS or value.split(" ")[0] in BAD_STATUS
            cls = "bad" if bad else "text" if column in wrap else ""
            cells.append(f'<td class="{cls}">{html.escape(value)}</td>' if cls else f"<td>{html.escape(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    line = f'<p class="consts">{html.escape(consts)}</p>' if consts else ""
    # The scroll box: a table wider than the page scrolls inside it instead of running off the page.
    return (
        f'{line}<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def figure_html(path: Path) -> str:
    """A PNG inlined as base64, captioned with its file name."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.stem)
    return f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>'


def pair(figures: Sequence[Path], table: str) -> str:
    """Figures on the left, the table they draw on the right (below it in a narrow window)."""
    figs = "".join(figure_html(p) for p in figures)
    if not figs:
        return table
    return f'<div class="pair"><div class="figs">{figs}</div><div class="tab">{table}</div></div>'


def wide(figures: Sequence[Path]) -> str:
    """Figures one under the other, each as wide as the page (at most its own pixel width)."""
    return '<div class="wide">' + "".join(figure_html(p) for p in figures) + "</div>"


def details(summary: str, body: str) -> str:
    """A collapsed section (no script: the browser's own <details>)."""
    return f"<details><summary>{html.escape(summary)}</summary>{body}</details>"
