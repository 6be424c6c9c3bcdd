"""What the advisor of this checkout would pick, replayed on cells measured earlier (no GPU needed).

For each model of a brute-force run (``jobs/check_advise_gpu.sh OUT brute`` and ``... advise``): its
profile from its advise run's solo cell combined with its brute-force solos (as ``advise --fit`` on
that directory combines them), parameters fitted on the *other* models' brute-force cells
(leave-one-out), every naive and MPS degree of the brute force ranked by predicted throughput, and
the first ``--k`` of the confirmation's order (best predicted, then the plateau's knee) "confirmed"
by looking up what the brute force measured for them (the median of its runs): the pick, its
regret against the best measured configuration and the prediction's error at the pick. A replay,
not a run: the confirmation's own short cells are not re-measured.

``--probe 14`` lets the model's own first MPS cell at degree 14 into its fit, as the advisor's
default MPS probe at the largest degree it ranks would.

    python jobs/advise_whatif.py OUT [--k 2] [--probe 14]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis.load import load_sweeps
from raycolloc.advise.confirm import plateau_order
from raycolloc.advise.fit import fit
from raycolloc.advise.model import Gpu, predict
from raycolloc.advise.observe import observations_in
from raycolloc.advise.profile import combine, gpu_costs_in, profiles_in
from raycolloc.advise.rank import uniform_candidates
from raycolloc.advise.spread import with_intervals
from raycolloc.mode_kinds import mode_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from advise_regret import measured  # a sibling script: jobs/ is not a package


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--k", type=int, default=2)
    p.add_argument(
        "--probe",
        default="",
        help="degrees (e.g. 14) whose first MPS brute-force cell of the model itself enters its fit, "
        "as the advisor's default MPS probe at the largest ranked degree would",
    )
    args = p.parse_args()
    brute = sorted(d for d in (args.out / "res" / "brute").iterdir() if d.is_dir())
    data = load_sweeps(brute)
    costs = gpu_costs_in(data.cells, data.jobs)
    profiles = profiles_in(data.cells, data.jobs, data.epochs, data.telemetry, costs)
    observations = observations_in(data.cells, data.jobs, profiles, costs, None)
    wanted = {int(x) for x in args.probe.split(",") if x}
    for d in brute:
        adv = args.out / "res" / f"adv-{d.name}"
        solo_dirs = sorted({q.parent for q in adv.rglob("cells.parquet")}) if adv.is_dir() else []
        own = load_sweeps([d]).cells
        workload = str(own["workload"].iloc[0])
        history = next(v for (g, w, s), v in profiles.items() if w == workload)
        profile = history
        if solo_dirs:
            a = load_sweeps(solo_dirs)
            new = profiles_in(a.cells, a.jobs, a.epochs, a.telemetry, gpu_costs_in(a.cells, a.jobs))
            profile = combine([*new.values(), history])
        own = own[
            (own["degree"].isin(wanted)) & (own["status"] == "ok") & own["mode"].map(lambda m: mode_of(m).needs_daemon)
        ].sort_values("started_at")
        keep = frozenset(str(x) for x in own.drop_duplicates(["mode", "degree"])["cell_dir"])
        params = fit(observations, exclude=frozenset({workload}), gpu_name=profile.gpu_name, keep=keep)
        truth = measured(d)  # each configuration's median, as the table step reads it
        degrees = sorted({int(k.split("x")[1]) for k in truth})
        gpu = Gpu(profile.gpu_name, profile.gpu_memory_mib, 0.0, None)
        preds = [
            with_intervals(predict(c, gpu, params), params, [profile.rate_rel_hw])
            for c in uniform_candidates(profile, gpu, degrees)
        ]
        preds = [q for q in preds if f"{q.mode} x{q.degree}" in truth and not q.active_thread_percentage and q.fits]
        preds.sort(key=lambda q: -(q.agg_samples_per_s or 0))
        top = plateau_order(preds)[: args.k]  # as the advisor orders what it confirms
        got = {q.label: truth.get(f"{q.mode} x{q.degree}") for q in top}
        pick = max(top, key=lambda q: got[q.label] or 0)
        best = max(truth, key=lambda k: truth[k])
        m, predicted = got[pick.label] or 0.0, pick.agg_samples_per_s or 0.0
        print(
            f"{workload}: profile {profile.samples_per_s:,.0f} samples/s from {len(profile.runs)} run(s); "
            f"top {args.k} predicted {', '.join(f'{q.mode} x{q.degree} {q.agg_samples_per_s:,.0f}' for q in top)}; "
            f"pick {pick.mode} x{pick.degree}: measured {m:,.0f}, predicted {predicted:,.0f} "
            f"({predicted / m - 1:+.1%}); best {best} {truth[best]:,.0f}; regret {1 - m / truth[best]:+.1%}"
        )
        print(f"    {params.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
