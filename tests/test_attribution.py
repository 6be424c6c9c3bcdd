"""The attribution rules (analysis/attribution.py) on synthetic cells, the clock-event names, the
foreign-process rule, the simulated clock cap and ``cluster.sim_inject``'s checks: no Ray."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from analysis import attribution
from analysis.attribution import Baseline, attribute, baseline, likely_causes, section
from raycolloc.config import ClusterConfig, config_hash
from raycolloc.config_checks import ConfigError
from raycolloc.driver.noise import cell_noise, job_noise
from raycolloc.node.gpu.clock_events import reason_names
from raycolloc.node.gpu.sim import SIM_SM_CLOCK_MHZ, SimBackend
from raycolloc.node.hostclock import core_mhz, foreign_count, load_avg_1m, run_delay_s
from raycolloc.results.rows import EpochRow, TelemetryRow

from .conftest import ROOT, load

QUIET = {
    "clock_events": "",
    "clock_event_share": 0.0,
    "cpu_wait_share_max": 0.01,
    "invol_switches_per_s_max": 3.0,
    "core_mhz_min": 3000.0,
    "foreign_gpu_procs": 0,
}


def test_a_quiet_cell_names_nothing_and_missing_columns_are_unknown() -> None:
    assert likely_causes(QUIET, Baseline(3000.0)) == ""
    assert likely_causes({}, None) == ""  # a sweep written before these columns
    assert likely_causes({**QUIET, "clock_events": "gpu_idle", "clock_event_share": 0.0}) == ""


def test_a_power_cap_is_named_with_its_reason() -> None:
    row = {**QUIET, "clock_events": "gpu_idle,sw_power_cap", "clock_event_share": 0.4}
    assert likely_causes(row, Baseline(3000.0)) == "clocks dropped (sw_power_cap)"
    # Below the threshold: one capped sample in a long window is not a cause.
    below = {**row, "clock_event_share": attribution.CLOCK_EVENT_SHARE / 2}
    assert likely_causes(below, Baseline(3000.0)) == ""


def test_a_thermal_cap_is_named_as_such() -> None:
    row = {**QUIET, "clock_events": "hw_thermal_slowdown", "clock_event_share": 0.3}
    assert likely_causes(row) == "thermal cap"


def test_cpu_contention_from_the_wait_for_a_core_with_switches_and_core_clock() -> None:
    row = {**QUIET, "cpu_wait_share_max": 0.45, "invol_switches_per_s_max": 180.0, "core_mhz_min": 2700.0}
    assert likely_causes(row, Baseline(3000.0)) == (
        "CPU contention (waited for a core 45% of epoch 2, 180 involuntary switches/s, core MHz -10%)"
    )


def test_without_schedstats_cpu_contention_comes_from_preemptions() -> None:
    row = {**QUIET, "cpu_wait_share_max": None, "invol_switches_per_s_max": 900.0}
    assert likely_causes(row, Baseline(3000.0)) == "CPU contention (900 involuntary switches/s)"
    assert likely_causes({**row, "invol_switches_per_s_max": 20.0}, Baseline(3000.0)) == ""


def test_a_slow_core_clock_alone_is_named() -> None:
    row = {**QUIET, "core_mhz_min": 2400.0}
    assert likely_causes(row, Baseline(3000.0)).startswith("CPU contention (") and "core MHz -20%" in likely_causes(
        row, Baseline(3000.0)
    )


def test_foreign_processes_and_side_by_side_cells_ranked_after_a_measured_cause() -> None:
    row = {
        **QUIET,
        "foreign_gpu_procs": 2,
        "overlapping_cells": 3,
        "clock_events": "sw_power_cap",
        "clock_event_share": 0.8,
    }
    assert likely_causes(row) == (
        "clocks dropped (sw_power_cap); foreign GPU processes (2); cells side by side (3 overlapping)"
    )
    assert likely_causes({**QUIET, "foreign_gpu_procs": 1}) == "foreign GPU process"
    assert likely_causes({**QUIET, "foreign_gpu_procs": None}) == ""  # NVML hid the processes: unknown


def test_attribute_compares_core_clocks_with_the_sweeps_median_and_section_lists_noisy_cells() -> None:
    cells = pd.DataFrame(
        [
            {**QUIET, "label": "a", "mode": "naive", "degree": 1, "agg_samples_per_s": 100.0},
            {**QUIET, "label": "b", "mode": "naive", "degree": 2, "agg_samples_per_s": 150.0},
            {**QUIET, "label": "c", "mode": "mps", "degree": 1, "core_mhz_min": 2000.0, "agg_samples_per_s": 90.0},
        ]
    )
    out = attribute(cells)
    assert list(out["likely_cause"]) == [
        "",
        "",
        "CPU contention (waited for a core 1% of epoch 2, 1% in the usual cell, 3 involuntary switches/s, "
        "core MHz -33%)",
    ]
    page = section(cells)
    assert "Why runs were noisy" in page and "core MHz -33%" in page and ">a<" not in page
    unstable = cells.assign(unstable=[True, False, False], rate_cv=[0.2, 0.01, 0.02])
    assert ">a<" in section(unstable)  # flagged unstable: listed even with no cause found
    quiet = cells.assign(core_mhz_min=3000.0)
    assert "No cell was unstable" in section(quiet)


def test_contention_is_a_wait_above_the_usual_one_and_a_slower_step_alone_is_a_slow_core() -> None:
    # On a GPU every training thread waits ~22% for its one core (CUDA's threads of its own process
    # share it): that is the usual wait, not contention. 45% is 23 points above it: contention.
    usual = Baseline(wait_share=0.22, quickest_ms={"g": 4.0})
    row = {**QUIET, "cpu_wait_share_max": 0.24, "invol_switches_per_s_max": 150.0, "repeat_group": "g"}
    assert likely_causes({**row, "cpu_ms_per_step_max": 4.2}, usual) == ""
    assert likely_causes({**row, "cpu_wait_share_max": 0.45}, usual).startswith(
        "CPU contention (waited for a core 45% of epoch 2, 22% in the usual cell"
    )
    # The usual wait, but 60% more CPU time a step than the configuration's quickest run: the core ran slow.
    assert likely_causes({**row, "cpu_ms_per_step_max": 6.4}, usual) == (
        "core ran slow (CPU time per step +60% over the configuration's quickest run, its wait for a core as usual)"
    )
    assert likely_causes({**row, "cpu_ms_per_step_max": 4.3}, usual) == ""  # +7.5%: within SLOW_CORE
    # A configuration of one run has no quickest run to compare with: nothing is said.
    assert likely_causes({**row, "repeat_group": "one", "cpu_ms_per_step_max": 9.0}, usual) == ""


def test_a_single_hogged_cell_is_still_contention_the_usual_wait_has_a_ceiling() -> None:
    one = pd.DataFrame([{**QUIET, "label": "hog", "cpu_wait_share_max": 0.62}])
    assert baseline(one).wait_share == attribution.USUAL_WAIT_CAP
    assert attribute(one)["likely_cause"].iloc[0].startswith("CPU contention (waited for a core 62% of epoch 2")
    # The same configuration's runs on another host are not its quickest run.
    two_hosts = pd.DataFrame(
        [
            {**QUIET, "repeat_group": "g", "hostname": h, "cpu_ms_per_step_max": ms}
            for h, ms in (("fast", 4.0), ("fast", 4.1), ("slow", 6.0), ("slow", 6.1))
        ]
    )
    assert (attribute(two_hosts)["likely_cause"] == "").all()


def test_baseline_takes_each_configurations_quickest_of_two_runs_or_more() -> None:
    cells = pd.DataFrame(
        {
            "repeat_group": ["a", "a", "b", "c", "c"],
            "status": ["ok", "ok", "ok", "ok", "error"],
            "cpu_ms_per_step_max": [5.0, 4.0, 3.0, 6.0, 1.0],
            "cpu_wait_share_max": [0.2, 0.22, 0.3, 0.21, None],
        }
    )
    base = baseline(cells)
    assert base.quickest_ms == {"a": 4.0}  # b: one run; c: one ok run (a failed run is not a quickest)
    assert base.wait_share == pytest.approx(0.2075) and base.core_mhz is None  # the lower quartile


def test_on_an_h200_sweep_the_slow_runs_are_named_slow_cores_and_no_cell_contention() -> None:
    # Two sweeps of the resnet26 quick matrix on one H200 (twenty-second session), as recorded: every
    # cell's training threads waited 21-29% for their core; some runs ran at 0.6x their configuration's best.
    cells = pd.read_csv(ROOT / "tests" / "data" / "h200_resnet26_repro_cells.csv", dtype={"repeat_group": str})
    out = attribute(cells)
    assert not out["likely_cause"].str.contains("CPU contention").any()
    named_slow = out["likely_cause"].str.startswith("core ran slow")
    slow = out[named_slow]
    # The CPU readings alone split the runs as their rates do: every run named is at most 0.90 of its
    # configuration's fastest run (0.61-0.90), every run not named above it (0.92-1.00).
    share = out["agg_samples_per_s"] / out.groupby("repeat_group")["agg_samples_per_s"].transform("max")
    assert (share[named_slow] <= 0.91).all() and (share[~named_slow] > 0.91).all()
    assert named_slow.sum() == 16
    named = set(slow["sweep"] + ":" + slow["label"])
    assert "run_a:resnet26_cifar10-mps-x1-r2" in named  # 10,944 samples/s beside 17,817: 6.4 ms a step, not 3.8
    assert "run_b:resnet26_cifar10-mps-x2" in named  # one job at 7,900, the other at 16,500
    # The quickest runs of each configuration, and the configurations of one run, are never named.
    quickest = out.loc[out.groupby("repeat_group")["cpu_ms_per_step_max"].idxmin()]
    assert (quickest["likely_cause"] == "").all()


def test_clock_event_names() -> None:
    assert reason_names(0) == ""
    assert reason_names(0x4 | 0x40) == "sw_power_cap,hw_thermal_slowdown"
    assert reason_names(0x1 | 0x10000) == "gpu_idle,0x10000"  # a newer driver's bit is kept


def test_foreign_process_rule() -> None:
    me = os.getpid()
    assert foreign_count([me, 999_999_991], [me]) == 1
    assert foreign_count([me], [me]) == 0
    # NVML shows none of the cell's processes although it has some: it hides them, so unknown.
    assert foreign_count([999_999_991], [me]) is None


def test_host_readings_are_numbers_or_none() -> None:
    mhz = core_mhz(sorted(os.sched_getaffinity(0))[:1])
    assert mhz is None or 100 < mhz < 10_000
    assert core_mhz([]) is None
    assert load_avg_1m() is not None and load_avg_1m() >= 0
    delay = run_delay_s(os.getpid())
    assert delay is None or delay >= 0
    assert run_delay_s(999_999_991) is None


def test_simulated_clock_cap_lowers_the_clock_with_its_reason(tmp_path: Path) -> None:
    backend = SimBackend(tmp_path / "sim", "node-x", 1, "H100-80GB")
    uuid = backend.gpus()[0].uuid
    assert backend.clock_events(uuid) == "gpu_idle"
    backend.cap_clocks(uuid, 0.6)
    sample = backend.basic_sample(uuid)
    assert backend.clock_events(uuid) == "sw_power_cap"
    low, high = SIM_SM_CLOCK_MHZ
    assert sample["sm_clock_mhz"] == low  # idle: nothing runs, whatever the cap
    assert sample["power_limit_w"] == 700.0 and sample["mem_clock_mhz"] and sample["mem_clock_mhz"] > 0
    backend.cap_clocks(uuid, None)
    assert backend.clock_events(uuid) == "gpu_idle"


def test_cell_and_job_noise_summarise_the_measured_window() -> None:
    def gpu(ts: float, mhz: float, events: str, foreign: int | None) -> TelemetryRow:
        return TelemetryRow(
            "c",
            "g",
            None,
            None,
            "gpu",
            ts,
            "sim-nvml",
            sm_clock_mhz=mhz,
            clock_events=events,
            foreign_gpu_procs=foreign,
            temperature_c=50.0,
            power_limit_w=700.0,
            load_avg_1m=1.0,
        )

    def proc(ts: float, delay: float) -> TelemetryRow:
        return TelemetryRow(
            "c", "g", None, None, "process", ts, "sim-nvml", job_index=0, proc_core_mhz=2500.0, proc_run_delay_s=delay
        )

    rows = [
        gpu(0.5, 345.0, "gpu_idle", 0),
        gpu(1.0, 1980.0, "", 0),
        gpu(2.0, 1188.0, "sw_power_cap", 1),
        gpu(3.0, 1980.0, "", None),
        gpu(4.0, 1980.0, "", 0),
        proc(1.0, 10.0),
        proc(3.0, 11.0),
    ]
    e2 = EpochRow(
        "c",
        0,
        2,
        False,
        1.0,
        4.0,
        3.0,
        300,
        100.0,
        None,
        None,
        None,
        None,
        None,
        [],
        [],
        3,
        None,
        0.03,
        None,
        None,
        450,
        None,
        None,
        None,
    )
    job = job_noise(rows, 0, e2)
    assert job == pytest.approx(
        {
            "epoch2_core_mhz": 2500.0,
            "epoch2_invol_switches_per_s": 150.0,
            "epoch2_cpu_wait_share": 0.5,
            "epoch2_cpu_ms_per_step": 10.0,  # 0.03 s of the training thread's CPU over 3 steps
        }
    )
    assert job_noise(rows, 0, None)["epoch2_cpu_wait_share"] is None

    # The JobRow fields cell_noise reads.
    one = dict(epoch2_core_mhz=2500.0, epoch2_invol_switches_per_s=150.0, epoch2_cpu_wait_share=0.5)
    jobs = [SimpleNamespace(**one, epoch2_cpu_ms_per_step=4.0), SimpleNamespace(**one, epoch2_cpu_ms_per_step=None)]
    cell = cell_noise(rows, jobs, 1.0, 4.0)
    assert cell["sm_clock_min_mhz"] == 1188.0 and cell["clock_events"] == "sw_power_cap"
    assert cell["clock_event_share"] == pytest.approx(0.25) and cell["foreign_gpu_procs"] == 1
    assert cell["cpu_wait_share_max"] == 0.5 and cell["core_mhz_min"] == 2500.0
    assert cell["cpu_ms_per_step_max"] == 4.0
    assert all(v is None for v in cell_noise(rows, [], None, None).values())


def test_sim_inject_takes_one_name_or_a_list_and_is_refused_on_real_gpus() -> None:
    assert ClusterConfig(sim_inject="clock_drop").sim_inject == ["clock_drop"]
    assert ClusterConfig(sim_inject=["cpu_hog", "foreign_process"]).sim_inject == ["cpu_hog", "foreign_process"]
    assert ClusterConfig(sim_inject="none").sim_inject == []
    with pytest.raises(ConfigError, match="cluster.sim_inject='nope' is not allowed; choose one of"):
        ClusterConfig(sim_inject="nope")
    with pytest.raises(ConfigError, match="applies to cluster.backend=sim only"):
        ClusterConfig(backend="nvml", sim_inject="cpu_hog")


def test_sim_inject_changes_the_hash_only_when_set() -> None:
    clean, dropped = load([]), load(["cluster.sim_inject=clock_drop"])
    assert clean.config_hash != dropped.config_hash
    assert config_hash(clean.config) == clean.config_hash
