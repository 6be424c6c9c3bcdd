"""Tests for the advisor's reading of results and its ``--validate``, on fixture sweeps written with the
real writer (``raycolloc.results.store.write_cell``).

The fixture cells "measure" what the model predicts with known parameters, so a validation that reads
the tables right finds near-zero errors and the parameters back (leave-one-out); one cell that ran
out of memory although predicted to fit must be reported as unsafe. These fixtures test the reading
and the fitting, never the model: cells made by the model cannot show it wrong. The model is graded on
measured cells, the committed corpus (``tests/test_advise_corpus.py``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from analysis.load import load_sweeps
from raycolloc.advise.__main__ import main
from raycolloc.advise.model import Candidate, Gpu, ModeParams, Params, Slot, predict
from raycolloc.advise.profile import Profile, gpu_costs_in, profiles_in
from raycolloc.advise.validate import validate

from .conftest import write_fixture_cell

GPU = Gpu("NVIDIA H200", 143771.0, base_mib=600.0, cores=None)
TRUTH = Params(ModeParams(0.85, 4.0), ModeParams(0.95, 3.0), ModeParams(0.95, 3.0), 400.0, "truth")
T0 = 1000.0
CONTEXT_MIB = 760.0  # NVML's per-process memory beyond PyTorch's reserved pool, in these fixtures


def solo(name: str, rate: float, sm: float, busy: float, dram: float, reserved: float) -> Profile:
    return Profile(
        workload=name,
        settings="",
        gpu_name=GPU.name,
        gpu_memory_mib=GPU.memory_mib,
        backend="nvml",
        mode="naive",
        cell_dirs=(),
        config_hash="",
        batch_size=128,
        samples_per_s=rate,
        cpu_s_per_step=None,
        cpu_busy=0.5,
        sm_active=sm,
        busy=busy,
        busy_source="gr_engine_active",
        sm_occupancy=None,
        dram_active=dram,
        pcie_rx_bytes_s=None,
        power_w=150.0 + 400.0 * sm,
        energy_per_sample_j=None,
        peak_reserved_mib=reserved,
        peak_device_mib=reserved + CONTEXT_MIB,
        gpu_mem_used_mib=None,
        job_mem_mib=reserved + CONTEXT_MIB,
        mem_source="",
    )


WORKLOADS = {
    "small": solo("small", 16_000.0, 0.2, 0.4, 0.05, 440.0),
    "medium": solo("medium", 5_000.0, 0.45, 0.8, 0.2, 2000.0),
    "large": solo("large", 1_500.0, 0.7, 0.95, 0.3, 8000.0),
}


def write_cell(
    root: Path, p: Profile, mode: str, degree: int, *, status: str = "ok", repeat: int = 0, slow: float = 1.0
) -> None:
    """One cell measured exactly as the model predicts it with TRUTH (a solo: its profile); a
    ``repeat`` > 0 is a further run of the configuration, its rates divided by ``slow``."""
    pred = predict(Candidate(mode, (p,) * degree, (Slot(),) * degree), GPU, TRUTH)
    if slow != 1.0:
        pred = dataclasses.replace(
            pred,
            agg_samples_per_s=(pred.agg_samples_per_s or 0.0) / slow,
            jobs=tuple(dataclasses.replace(j, samples_per_s=j.samples_per_s / slow) for j in pred.jobs),
        )
    label = f"{p.workload}-{mode}-x{degree}" + (f"-r{repeat}" if repeat else "")
    group = f"{p.workload}-{mode}-x{degree}"
    cell_id = f"{label}-{abs(hash(label)) % 10**8:08d}"
    ok = status == "ok"
    start, end = T0 + 5.0, T0 + 15.0
    jobs, epochs = [], []
    for i, j in enumerate(pred.jobs):
        steps = int(j.samples_per_s * 10 / 128)
        jobs.append(
            {
                "cell_id": cell_id,
                "job_index": i,
                "job_name": f"{i}-{p.workload}",
                "workload": p.workload,
                "status": "ok" if ok else "oom",
                "batch_size": 128,
                "compile": "off",
                "amp": "off",
                "channels_last": False,
                "data_source": "synthetic",
                "data_placement": "host",
                "epoch2_samples_per_s": j.samples_per_s if ok else None,
                # NVML attributes no memory to an MPS client's process.
                "peak_mem_reserved_mib": p.peak_reserved_mib,
                "peak_device_mem_mib": p.job_mem_mib if mode == "naive" else None,
            }
        )
        for epoch, (a, b) in ((1, (T0, start)), (2, (start, end))):
            epochs.append(
                {
                    "cell_id": cell_id,
                    "job_index": i,
                    "epoch": epoch,
                    "warmup": epoch == 1,
                    "start_ts": a,
                    "end_ts": b,
                    "wall_s": b - a,
                    "samples": steps * 128,
                    "steps": steps,
                    "samples_per_s": steps * 128 / (b - a),
                    "thread_cpu_s": 0.5 * (b - a),
                }
            )
    sm = pred.sm_active if degree > 1 else 100 * p.sm_active
    tel = [
        {
            "cell_id": cell_id,
            "gpu_uuid": "GPU-0",
            "scope": "gpu",
            "ts": start + 0.5 * k,
            "source": "gpm",
            "sm_active": sm,
            "gr_engine_active": 100 * min(1.0, p.busy * pred.gain),
            "dram_active": 100 * p.dram_active,
            "gpu_util": 100.0,
        }
        for k in range(21)
    ]
    row: dict[str, Any] = {
        "cell_id": cell_id,
        "label": label,
        "config_hash": cell_id[-8:] + "00000000",
        "repeat": repeat,
        "repeat_group": f"{abs(hash(group)) % 10**8:08d}00000000",
        "status": status,
        "mode": mode,
        "degree": degree,
        "workload": p.workload,
        "mix": None,
        # A cell refused before it started (unfit) never leased a GPU.
        "gpu_name": None if status == "unfit" else GPU.name,
        "gpu_memory_mib": None if status == "unfit" else GPU.memory_mib,
        "backend": "nvml",
        "telemetry_source": "gpm",
        "started_at": T0,
        "finished_at": T0 + 20.0,
        "measured_start_ts": start,
        "measured_end_ts": end,
        "n_jobs": degree,
        "n_ok": degree if ok else 0,
        "agg_samples_per_s": pred.agg_samples_per_s if ok else None,
        "sm_active_mean": sm if ok else None,
        "power_mean_w": pred.power_w if ok else None,
        "mem_used_max_mib": pred.mem_expected_mib if ok else None,
        "config_json": json.dumps({"mode": {"name": mode}}),
        "env_json": "{}",
        "tags_json": "{}",
    }
    write_fixture_cell(root / label, {"cells": [row], "jobs": jobs, "epochs": epochs, "telemetry": tel})


@pytest.fixture(scope="module")
def _written_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture sweep, written once per module (~30 cells through the real writer); each test takes a copy."""
    root = tmp_path_factory.mktemp("validate") / "sweep"
    for p in WORKLOADS.values():
        for mode in ("naive", "mps"):
            for d in (1, 2, 3, 7):
                if (p.workload, mode, d) != ("large", "mps", 7):
                    write_cell(root, p, mode, d)
    # Fourteen large jobs under naive: 14 x 8.8 GiB fits the H200 (141 GiB), yet this run ran out of
    # memory: predicted to fit, it is what the validation must call unsafe.
    write_cell(root, WORKLOADS["large"], "naive", 14, status="oom")
    # Twenty would need 176 GiB: refused before it started, as predicted.
    write_cell(root, WORKLOADS["large"], "naive", 20, status="unfit")
    return root


@pytest.fixture
def sweep(_written_sweep: Path, tmp_path: Path) -> Path:
    """A copy of the fixture sweep of this test's own (a test adds cells to it)."""
    return Path(shutil.copytree(_written_sweep, tmp_path / "sweep"))


def test_profiles_read_from_the_tables(sweep: Path) -> None:
    data = load_sweeps([sweep])
    costs = gpu_costs_in(data.cells, data.jobs)
    assert costs[GPU.name].context_mib == pytest.approx(CONTEXT_MIB)
    assert costs[GPU.name].base_mib == pytest.approx(GPU.base_mib)
    found = {p.workload: p for p in profiles_in(data.cells, data.jobs, data.epochs, data.telemetry, costs).values()}
    assert set(found) == set(WORKLOADS)
    medium = found["medium"]
    assert medium.mode == "naive+mps" and len(medium.cell_dirs) == 2  # both solo cells, combined
    assert medium.mem_source == "NVML per-process memory"  # the naive solo's: NVML hides an MPS client's
    assert medium.samples_per_s == pytest.approx(5_000.0)
    assert (medium.sm_active, medium.busy, medium.dram_active) == pytest.approx((0.45, 0.8, 0.2))
    assert medium.busy_source == "gr_engine_active"
    assert medium.job_mem_mib == pytest.approx(2000.0 + CONTEXT_MIB)
    assert medium.cpu_busy == pytest.approx(0.5, rel=0.02)  # 0.5 s of CPU per s of steps


@pytest.mark.slow  # fits the model once per workload: ~5 s
def test_validate_reads_and_fits_leave_one_out(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A round trip, not a grade: the cells measured what TRUTH predicts, so the tables read right and
    a fit on the other two workloads give errors near zero (except where the other workloads' cells pin
    a parameter down less well: the naive sharpness, from workloads that saturate at degree 2 already)."""
    result = validate([sweep])
    scored = [c for c in result.checks if not c.profile_cell and c.status == "ok"]
    # Every ok cell but the solos (naive and MPS: the profiles) and each workload's MPS cell of the
    # largest degree (its probe, the calibration of its course past saturation: input too).
    assert len(scored) == 3 * 6 - 1 - 3
    probes = {c.label for c in result.checks if c.profile_cell and not c.label.endswith("-x1")}
    assert len(probes) == 3 and all("-mps-x" in label for label in probes)
    tput = sorted(abs(c.throughput_error or 0.0) for c in scored)
    # small's naive x2: 5.6%, its sharpness fitted 6 for 4 on the two others (saturated from x2 on).
    assert tput[len(tput) // 2] < 0.01 and tput[-1] < 0.06
    slow = sorted(abs(e) for c in scored for e in c.slowdown_errors)
    assert slow[len(slow) // 2] < 0.01 and slow[-1] < 0.06
    assert all(abs(c.mem_error or 0.0) < 0.01 for c in scored)
    for name, params in result.params.items():
        workload = name.split(" on ")[0]
        assert workload not in params.source.split(" (")[0], params.source  # never fitted on itself
        assert params.power_slope_w == pytest.approx(400.0, rel=0.01)
    assert result.unsafe_fits == ("large-naive-x14",)
    (refused,) = [c for c in result.checks if c.label == "large-naive-x20"]
    assert not refused.predicted.fits and not refused.unsafe_fit
    # No fixture cell records its measured interval: none is graded by the throughput targets (they
    # judge configurations measured within +-5%), and MIG, with no cell, is unfitted.
    graded = {m.name: (m.n, m.passed) for m in result.metrics if m.target != "-"}
    assert graded["throughput, measured ±5%"] == (0, None) and graded["per-job slowdown"][1] is True
    assert all(p.unfitted_modes == ("mig",) for p in result.params.values())
    # The command line: the table, the JSON, and exit 1 for the cell predicted to fit that ran out of memory.
    out = tmp_path / "v.json"
    assert main(["--validate", str(sweep), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "UNSAFE: predicted to fit" in printed and "aggregate throughput" in printed
    saved = json.loads(out.read_text())
    assert saved["unsafe_fits"] == ["large-naive-x14"] and len(saved["checks"]) == len(result.checks)
    assert any("memory" in a for a in saved["assumptions"])


def test_a_queue_on_real_gpus_predicts_with_the_fitted_parameters(sweep: Path, tmp_path: Path) -> None:
    """``queue.runner=ray`` with measured profiles: the raycolloc policy's model takes the parameters
    the advisor fits on the sweeps under ``out_dir``; the defaults where none has a collocated cell."""
    from raycolloc.advise.model import DEFAULT_PARAMS
    from raycolloc.queue.profiles import fitted_params

    fallback = dataclasses.replace(DEFAULT_PARAMS, power_slope_w=123.0)
    got = fitted_params(sweep.parent, GPU.name, fallback)
    assert (got.mps.capacity, got.mps.sharpness) == pytest.approx((TRUTH.mps.capacity, TRUTH.mps.sharpness))
    assert (got.naive.capacity, got.naive.sharpness) == pytest.approx((TRUTH.naive.capacity, TRUTH.naive.sharpness))
    assert got.source.startswith("fitted on")
    assert got.cpu_capacity == 1.0  # no core count: the queue's predictor has no CPU term either
    # The queue's own Gpu carries the catalogue's name; the cells NVML's: the profiles' name is asked.
    assert fitted_params(sweep.parent, "H200-141GB", fallback) is fallback
    assert fitted_params(tmp_path / "none", GPU.name, fallback) is fallback
    empty = tmp_path / "solos"
    write_cell(empty, WORKLOADS["small"], "naive", 1)  # a profile alone: nothing collocated to fit on
    assert fitted_params(empty, GPU.name, fallback) is fallback


def test_validation_judges_a_configuration_by_the_median_of_its_runs(sweep: Path) -> None:
    """Two more runs of one configuration, one of them slowed by half from outside: run by run the
    slow one is a 100% error; per configuration (the median of three) the targets see none."""
    write_cell(sweep, WORKLOADS["small"], "mps", 3, repeat=1, slow=2.0)
    write_cell(sweep, WORKLOADS["small"], "mps", 3, repeat=2)
    result = validate([sweep])
    runs = {c.label: c.throughput_error for c in result.checks}
    assert runs["small-mps-x3-r1"] == pytest.approx(1.0, abs=0.02)
    config = [c for c in result.configurations if c.label.startswith("small-mps-x3")]
    assert len(config) == 1 and abs(config[0].throughput_error or 0.0) < 0.02
    by_name = {(m.name, m.target): m for m in result.metrics}
    assert (by_name[("aggregate throughput", "-")].max_abs or 1.0) < 0.25
    assert (by_name[("aggregate throughput, run by run", "-")].max_abs or 0.0) > 0.9
