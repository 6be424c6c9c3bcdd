"""Issue 44's cheaper advice, judged: advise's GPU time and pick against measuring what it ranked.

``jobs/advise_cheap.sh`` runs the advisor from a fresh out_dir with its defaults, then measures the
configurations its ranking holds (naive and MPS at each ranked degree) in a second, fresh out_dir.
This helper reads both:

    python jobs/advise_cheap.py degrees ADVICE.json          # the ranked degrees, as degree=1,2,...
    python jobs/advise_cheap.py summary OUT [--limit 0.30 --regret 0.05]

``summary`` prints the advisor's GPU time (``gpu_time_s``: its own cells' wall time), the brute
force's (every cell under OUT/res/brute, summed the same way), their ratio, the pick (the confirmed
configuration, else the best predicted), the best measured, the regret (1 - the pick's measured
samples/s / the best's, both from the brute force) and whether the issue's bounds hold (ratio at
most 30%, regret at most 5%); writes the same to OUT/advise_cheap.json. Exit status: 0 when both
hold, 1 when one does not, 2 when something to judge is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis.load import load_sweeps
from raycolloc.advise.advice import gpu_time
from raycolloc.mode_kinds import mode_of


def ranked(advice: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The first ranking's workload and its naive and MPS rows (no active-thread split) that fit."""
    ranking = advice["rankings"][0]
    rows = [
        r
        for r in ranking["rows"]
        if mode_of(r["mode"]).advised and not r.get("active_thread_percentage") and r.get("fits")
    ]
    return ranking, rows


def degrees(path: Path) -> str:
    _, rows = ranked(json.loads(path.read_text()))
    return ",".join(str(d) for d in sorted({r["degree"] for r in rows}))


def measured(root: Path) -> dict[str, float]:
    """Each configuration's aggregate samples/s ('<mode> x<degree>'), the median of its ok runs."""
    cells = load_sweeps(sorted({p.parent for p in root.rglob("cells.parquet")})).cells
    ok = cells[cells["status"] == "ok"]
    return {
        f"{mode} x{degree}": float(statistics.median(runs["agg_samples_per_s"].dropna()))
        for (mode, degree), runs in ok.groupby(["mode", "degree"])
        if runs["agg_samples_per_s"].notna().any()
    }


def summary(out: Path, limit: float, regret_max: float) -> int:
    advice_file, brute = out / "advice.json", out / "res" / "brute"
    if not advice_file.is_file() or not any(brute.rglob("cells.parquet")):
        print(f"nothing to judge: {advice_file} or the cells under {brute} are missing")
        return 2
    advice = json.loads(advice_file.read_text())
    ranking, rows = ranked(advice)
    truth = measured(brute)
    key = {r["label"]: f"{r['mode']} x{r['degree']}" for r in rows}
    pick = ranking.get("confirmed") or ranking.get("best_throughput")
    wanted = sorted(set(key.values()))
    best = max(truth, key=lambda k: truth[k]) if truth else None
    brute_s, brute_cells = gpu_time(brute)
    advise_s = float(advice.get("gpu_time_s") or 0.0)
    pick_rate = truth.get(key.get(pick, ""))
    regret = 1 - pick_rate / truth[best] if pick_rate and best else None
    ratio = advise_s / brute_s if brute_s else None
    result = {
        "workload": ranking.get("group"),
        "advise_gpu_s": advise_s,
        "advise_cells": advice.get("gpu_cells"),
        "brute_gpu_s": brute_s,
        "brute_cells": brute_cells,
        "ratio": ratio,
        "pick": pick,
        "pick_measured": pick_rate,
        "best_measured": best,
        "best_measured_rate": truth.get(best) if best else None,
        "regret": regret,
        "ranked": wanted,
        "not_measured": [k for k in wanted if k not in truth],
        "measured": truth,
        "predicted": {key[r["label"]]: r.get("agg_samples_per_s") for r in rows},
        "confirm_note": ranking.get("confirm_note"),
        "limit_ratio": limit,
        "limit_regret": regret_max,
    }
    ok = ratio is not None and ratio <= limit and regret is not None and regret <= regret_max
    result["pass"] = ok
    for k in wanted:
        m, p = truth.get(k), result["predicted"].get(k)
        err = f"{p / m - 1:+.1%}" if m and p else "-"
        print(f"  {k:<10} predicted {p or 0:>10,.0f}  measured {m or 0:>10,.0f}  error {err}")
    print(f"advise GPU time: {advise_s:.1f} s ({advice.get('gpu_cells')} cells)")
    print(f"brute-force GPU time: {brute_s:.1f} s ({brute_cells} cells, of {len(wanted)} configurations ranked)")
    print(f"ratio: {'-' if ratio is None else f'{ratio:.1%}'} (bound {limit:.0%})")
    print(f"pick: {pick} (measured {pick_rate or 0:,.0f} samples/s)")
    print(f"best measured: {best} ({truth.get(best, 0) if best else 0:,.0f} samples/s)")
    print(f"regret: {'-' if regret is None else f'{regret:.1%}'} (bound {regret_max:.0%})")
    print(f"verdict: {'PASS' if ok else 'FAIL'}")
    (out / "advise_cheap.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out / 'advise_cheap.json'}")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("degrees")
    d.add_argument("advice", type=Path)
    s = sub.add_parser("summary")
    s.add_argument("out", type=Path)
    s.add_argument("--limit", type=float, default=0.30)
    s.add_argument("--regret", type=float, default=0.05)
    args = p.parse_args()
    if args.what == "degrees":
        print(degrees(args.advice))
        return 0
    return summary(args.out, args.limit, args.regret)


if __name__ == "__main__":
    sys.exit(main())
