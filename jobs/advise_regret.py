"""Issue 32's table: the advisor's confirmed pick per model against a brute-force sweep of the same model.

Reads what ``jobs/check_advise_gpu.sh OUT brute`` and ``... advise`` left under OUT:
``OUT/res/brute/<model>/`` (naive and MPS at every degree: the ground truth, each configuration the
median of its runs), ``OUT/advice-<model>.json`` and ``OUT/res/adv-<model>/`` (the advice and the
cells it ran: profile, probes, confirmation). Per model it prints every configuration (predicted
samples/s with its 95% interval, extrapolated or not, measured by the brute force, error), then the
pick: its measured rate, the best measured configuration, the regret (1 - pick / best, the pick's
number from the brute force where it ran it, else from its confirming cell), the
prediction's error at the pick, and the GPU time of advise + confirm against the brute force's.
Writes the same as JSON (``--out``).

    python jobs/advise_regret.py OUT [--out regret.json]
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
from raycolloc.mode_kinds import MODE_KINDS


def gpu_time(root: Path) -> float:
    """The cells' wall time summed (each cell once) under ``root``."""
    dirs = sorted({p.parent for p in root.rglob("cells.parquet")})
    if not dirs:
        return 0.0
    c = load_sweeps(dirs).cells.drop_duplicates("cell_id")
    return float((c["finished_at"] - c["started_at"]).clip(lower=0).sum())


def measured(root: Path) -> dict[str, float]:
    """Each configuration's aggregate samples/s ('<mode> x<degree>'): the median of its ok runs."""
    cells = load_sweeps(sorted({p.parent for p in root.rglob("cells.parquet")})).cells
    ok = cells[cells["status"] == "ok"]
    out = {}
    for (mode, degree), runs in ok.groupby(["mode", "degree"]):
        out[f"{mode} x{degree}"] = float(statistics.median(runs["agg_samples_per_s"].dropna()))
    return out


def model_table(out: Path, name: str) -> dict[str, Any]:
    advice = json.loads((out / f"advice-{name}.json").read_text())
    ranking = advice["rankings"][0]
    truth = measured(out / "res" / "brute" / name)
    rows = []
    for row in ranking["rows"]:
        kind = MODE_KINDS.get(row["mode"])
        if kind is None or not kind.advised or row.get("active_thread_percentage"):
            continue
        key = f"{row['mode']} x{row['degree']}"
        m = truth.get(key)
        interval = row.get("agg_interval") or {}
        low, high = interval.get("low"), interval.get("high")
        rows.append(
            {
                "config": key,
                "predicted": row["agg_samples_per_s"],
                "interval": [low, high],
                "extrapolated": bool(row.get("extrapolated")),
                "measured": m,
                "error": row["agg_samples_per_s"] / m - 1 if m and row["agg_samples_per_s"] else None,
            }
        )
    pick_label = ranking.get("confirmed")
    runs = {m["label"]: m for m in ranking.get("measured") or []}
    pick = runs.get(pick_label) if pick_label else None
    pick_row = next((r for r in ranking["rows"] if r["label"] == pick_label), None)
    best_key = max(truth, key=lambda k: truth[k])
    pick_rate = pick["samples_per_s"] if pick else None
    # Regret against the brute force's own number for the pick (the median of its runs); a pick the
    # brute force did not run (a degree beyond it) is judged by its confirming cell, and says so.
    pick_key = f"{pick_row['mode']} x{pick_row['degree']}" if pick_row else None
    judged = truth.get(pick_key) if pick_key else None
    judged_by = "brute force" if judged is not None else "confirming cell"
    judged = judged if judged is not None else pick_rate
    brute_s, advise_s = gpu_time(out / "res" / "brute" / name), gpu_time(out / "res" / f"adv-{name}")
    return {
        "model": name,
        "rows": sorted(rows, key=lambda r: (r["config"].split()[0], int(r["config"].split("x")[1]))),
        "pick": pick_label,
        "pick_measured": pick_rate,
        "pick_predicted": pick_row["agg_samples_per_s"] if pick_row else None,
        "pick_interval": [(pick_row.get("agg_interval") or {}).get(k) for k in ("low", "high")] if pick_row else None,
        "pick_extrapolated": bool(pick_row.get("extrapolated")) if pick_row else None,
        "best": best_key,
        "best_measured": truth[best_key],
        "pick_brute_force": truth.get(pick_key) if pick_key else None,
        "regret": 1 - judged / truth[best_key] if judged else None,
        "regret_judged_by": judged_by,
        "pick_prediction_error": pick_row["agg_samples_per_s"] / pick_rate - 1 if pick_rate and pick_row else None,
        "brute_gpu_s": brute_s,
        "advise_gpu_s": advise_s,
        "gpu_time_share": advise_s / brute_s if brute_s else None,
    }


def _n(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None else format(v, fmt)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--out", dest="json_out", type=Path)
    args = p.parse_args()
    names = sorted(f.stem.removeprefix("advice-") for f in args.out.glob("advice-*.json"))
    if not names:
        print(f"no advice-*.json under {args.out}", file=sys.stderr)
        return 2
    tables = [model_table(args.out, n) for n in names]
    for t in tables:
        print(f"\n{t['model']}")
        print(f"  {'config':<10} {'predicted':>10} {'95% interval':>21} {'ext':>3} {'measured':>10} {'error':>7}")
        for r in t["rows"]:
            low, high = r["interval"]
            iv = f"[{_n(low)}, {_n(high)}]" if low is not None else "-"
            err = "-" if r["error"] is None else f"{r['error']:+.1%}"
            ext = "*" if r["extrapolated"] else ""
            print(f"  {r['config']:<10} {_n(r['predicted']):>10} {iv:>21} {ext:>3} {_n(r['measured']):>10} {err:>7}")
        reg = "-" if t["regret"] is None else f"{t['regret']:+.1%}"
        perr = "-" if t["pick_prediction_error"] is None else f"{t['pick_prediction_error']:+.1%}"
        share = "-" if t["gpu_time_share"] is None else f"{t['gpu_time_share']:.0%}"
        print(
            f"  pick {t['pick']}: measured {_n(t['pick_measured'])}, predicted {_n(t['pick_predicted'])} ({perr}); "
            f"best measured {t['best']} {_n(t['best_measured'])}; regret {reg} (the pick's number from the "
            f"{t['regret_judged_by']}); GPU time advise+confirm "
            f"{t['advise_gpu_s']:.0f} s of the brute force's {t['brute_gpu_s']:.0f} s ({share})"
        )
    json_out = args.json_out or args.out / "regret.json"
    json_out.write_text(json.dumps(tables, indent=2))
    print(f"\nwrote {json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
