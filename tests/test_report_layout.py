"""The report reads at 1400 px (issue 29, item 9): no table runs off the page (each scrolls inside its
own box), and the PCIe and power timelines are drawn at the page's width, not as thumbnails.

The report is built as the issue ran it (``python -m analysis.report SWEEP --out DIR``, in process)
on a sweep shaped like the issue's: repeats (every number with its spread), compiled and eager
settings, degrees 1 and 7, a best solo whose settings differ from the best configuration's. Where a
headless Chromium is installed, the page is also laid out at 1400 px and measured.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from analysis.page import CONTENT_PX, CSS, table_html
from analysis.report import main

from .test_analysis import cell, epochs_of, job

WORKLOADS = (("efficientnetv2s_imagenet64", 0.70, 0.9), ("resnet26_cifar10", 0.30, 1.1))
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def wide_sweep(root: Path) -> Path:
    """Two workloads x naive/mps x degree 1, 7 x compile off/max-autotune x 2 repeats (32 cells)."""
    n = 0
    for workload, scale, compiled in WORKLOADS:
        for mode in ("naive", "mps"):
            for degree in (1, 7):
                for repeat in (0, 1):
                    for compile_mode in ("off", "max-autotune"):
                        e2 = 2.0 * (1 - scale + scale * degree) * (1.05 if repeat else 0.95)
                        e2 *= (compiled if compile_mode != "off" else 1.0) * (0.93 if mode == "mps" else 1.0)
                        jobs = [job(i, workload, e2, compile_mode=compile_mode, samples=50_000) for i in range(degree)]
                        cell(
                            root,
                            str(n),
                            workload,
                            mode,
                            jobs,
                            agg=degree * 50_000 / e2,
                            energy_j=300.0 * e2,
                            epochs=[e for j in jobs for e in epochs_of(j, warmup_s=3.0)],
                            repeat=repeat,
                            repeat_group=f"{workload}-{mode}-{degree}-{compile_mode}",
                            gpu_name="NVIDIA H200",
                            extra_config={"trainer": {"compile": compile_mode}},
                        )
                        n += 1
    return root


def test_a_table_scrolls_inside_its_box() -> None:
    page = table_html(pd.DataFrame({"a": ["x" * 300], "b": ["y"]}))
    assert page.startswith('<div class="scroll"><table>') and page.endswith("</table></div>")
    assert ".scroll{max-width:100%;overflow-x:auto" in CSS


def _probe(page: Path) -> dict[str, int]:
    """Lay ``page`` out in headless Chromium at 1400 px; the widths a script measured there."""
    probe = page.with_name("probe.html")
    script = (
        "<script>const d=document.documentElement,b=document.body,"
        "imgs=[...document.querySelectorAll('.wide img')];"
        "b.dataset.scroll=d.scrollWidth;b.dataset.client=d.clientWidth;b.dataset.figs=imgs.length;"
        "b.dataset.narrowest=Math.min(...imgs.map(i=>i.getBoundingClientRect().width));</script>"
    )
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    dom = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {k: int(float(v)) for k, v in re.findall(r'data-(scroll|client|figs|narrowest)="([\d.]+)"', dom)}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of :func:`wide_sweep`, built by the CLI; its directory."""
    tmp = tmp_path_factory.mktemp("layout")
    out = tmp / "report"
    assert main([str(wide_sweep(tmp / "sweep")), "--out", str(out), "--log-level", "WARNING"]) == 0
    return out


@pytest.mark.slow  # 32 fixture cells and every figure: ~20 CPU-seconds
def test_every_table_scrolls_and_timelines_are_full_width(report: Path) -> None:
    page = (report / "report.html").read_text()
    # Every table sits in a scroll box, the best configuration's among them, with all its columns.
    assert page.count("<table>") == page.count('<div class="scroll"><table>') > 10
    best = page[page.index("Best configuration per workload") : page.index("The study's claims")]
    assert '<div class="scroll"><table>' in best and "<th>J/sample vs solo</th>" in best
    assert "channels_last=False" not in best  # best solo: only the settings that differ from the defaults
    # Timelines: one under the other, each drawn at the page's width (its fonts shown at their drawn size).
    for name in ("fig5_pcie_rx", "fig7_power"):
        for workload, *_ in WORKLOADS:
            png = report / f"{name}_{workload}.png"
            assert Image.open(png).size[0] == CONTENT_PX
            assert re.search(rf'<div class="wide">(<figure>.*?</figure>)*?<figure><img alt="{png.stem}"', page)
    assert ".wide figure img{width:auto;max-width:100%" in CSS


@pytest.mark.slow  # the fixture's report (shared with the test above) and a headless browser: ~3 s more
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium to lay the page out (apt-get install chromium)")
def test_the_page_fits_1400px_in_a_browser(report: Path) -> None:
    widths = _probe(report / "report.html")
    assert widths["scroll"] <= widths["client"], widths  # the page does not scroll sideways
    assert widths["figs"] == 4 and widths["narrowest"] >= 1200, widths  # timelines shown >= 1200 px wide
