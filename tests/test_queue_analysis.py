"""The queue's runs side by side (issue 33's report): the timeline of SM activity and jobs, and the CLI's
table, CSVs and figures from real replays."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.queue import main, run_identity, timeline
from raycolloc.queue.replay import replay
from raycolloc.queue.report import Summary, baseline, format_policies, same_gpus
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.trace import write_trace
from raycolloc.queue.tracegen import generate


def test_the_timeline_holds_each_gpus_value_until_its_next_row() -> None:
    gpus = pd.DataFrame(
        {
            "t": [0.0, 0.0, 5.0, 10.0, 10.0],
            "gpu": ["g0", "g1", "g1", "g0", "g1"],
            "sm_active": [0.5, 0.0, 1.0, 0.0, 0.0],
            "jobs": [1, 0, 2, 0, 0],
        }
    )
    line = timeline(gpus, points=11)  # t = 0, 1, ..., 10
    at = line.set_index("t")
    assert at.loc[2.0, "sm_active"] == pytest.approx(0.25) and at.loc[2.0, "jobs"] == 1
    assert at.loc[7.0, "sm_active"] == pytest.approx(0.75) and at.loc[7.0, "jobs"] == 3
    assert at.loc[10.0, "sm_active"] == 0.0 and at.loc[10.0, "jobs"] == 0


@pytest.mark.slow
def test_the_policies_side_by_side_from_their_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    words = ["cluster=local", "cluster.num_gpus=2", f"out_dir={tmp_path}"]
    settings = compose_settings(words)
    trace = write_trace(tmp_path / "t.csv", generate(12, 5, settings.config.queue, settings.gpu))
    for policy in ("exclusive", "carma", "raycolloc"):
        replay(trace, compose_settings([*words, f"queue.policy={policy}"]))
    out = tmp_path / "report"
    assert main([str(tmp_path / "queue"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "exclusive" in printed and "raycolloc" in printed and "1.00x" in printed
    table = pd.read_csv(out / "queue_policies.csv")
    assert sorted(table["policy"]) == ["carma", "exclusive", "raycolloc"] and (table["ended"] == 12).all()
    line = pd.read_csv(out / "queue_timeline.csv")
    assert set(line["policy"]) == {"carma", "exclusive", "raycolloc"} and line["sm_active"].between(0, 1).all()
    assert (out / "queue_sm_activity.png").stat().st_size > 0 and (out / "queue_jct.png").stat().st_size > 0
    assert main([str(tmp_path / "nothing"), "--out", str(out)]) == 2


@pytest.mark.slow
def test_runs_are_keyed_by_run_and_compared_only_within_their_trace_and_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two, four = ["cluster=local", "cluster.num_gpus=2"], ["cluster=local", "cluster.num_gpus=4"]
    settings = compose_settings(two)
    a = write_trace(tmp_path / "a.csv", generate(12, 5, settings.config.queue, settings.gpu))
    b = write_trace(tmp_path / "b.csv", generate(12, 6, settings.config.queue, settings.gpu))

    def run(trace: Path, cluster: list[str], policy: str, out: str) -> float:
        words = [*cluster, f"out_dir={tmp_path / out}", f"queue.policy={policy}"]
        return float(replay(trace, compose_settings(words)).summary.makespan_s or 0.0)

    other_exclusive = run(b, two, "exclusive", "b")  # another trace's exclusive, found first below
    exclusive = run(a, two, "exclusive", "a")
    ours = run(a, two, "raycolloc", "a")
    run(a, four, "raycolloc", "a4")  # the same policy again, on another cluster: no baseline of its own
    assert other_exclusive != exclusive
    out = tmp_path / "report"
    dirs = [str(tmp_path / d / "queue") for d in ("b", "a", "a4")]
    assert main([*dirs, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        sum(x.startswith("trace ") for x in printed.splitlines()) == 3
        and "no exclusive run of this trace and cluster" in printed
    )
    table = pd.read_csv(out / "queue_policies.csv").set_index("run")
    assert sorted(table.index) == ["exclusive", "exclusive#2", "raycolloc", "raycolloc#2"]
    assert table.loc["raycolloc", "makespan_s_vs_exclusive"] == pytest.approx(ours / exclusive)
    assert pd.isna(table.loc["raycolloc#2", "makespan_s_vs_exclusive"])
    assert table.loc["raycolloc", "trace"] == table.loc["raycolloc#2", "trace"] != table.loc["exclusive", "trace"]
    assert table.loc["raycolloc", "cluster"] != table.loc["raycolloc#2", "cluster"]
    line = pd.read_csv(out / "queue_timeline.csv")
    assert set(line["run"]) == set(table.index)  # two runs of a policy: both timelines kept
    # Review item 12: the printed tables name each run as the CSV does, not by its policy twice.
    rows = [
        x.split()[0] for x in printed.splitlines() if x.split() and x.split()[0].startswith(("exclusive", "raycolloc"))
    ]
    assert sorted(rows) == sorted(table.index), printed


@pytest.mark.parametrize("name", ["run#1", "run%20x", "run?x"])
def test_a_run_directory_with_uri_characters_is_read_by_its_state_database(tmp_path: Path, name: str) -> None:
    import sqlite3

    run = tmp_path / name
    run.mkdir()
    con = sqlite3.connect(run / "queue.sqlite")
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.executemany("INSERT INTO meta VALUES (?, ?)", [("trace", "abc123"), ("cluster", "2 x H200")])
    con.commit()
    con.close()
    assert run_identity(run, pd.DataFrame(), pd.DataFrame()) == ("abc123", "2 x H200")


def _summary(policy: str, makespan: float, gpus: str) -> Summary:
    return Summary(policy, 60, 60, True, makespan, 10.0, 20.0, makespan * 1000.0, 0, 0, 1.2, 0, makespan, gpus=gpus)


def test_a_run_is_measured_against_the_exclusive_run_on_its_own_gpus_and_marked_where_there_is_none() -> None:
    host_a, host_b = _summary("exclusive", 200.0, "GPU-a1,GPU-a2"), _summary("exclusive", 180.0, "GPU-b1,GPU-b2")
    on_b, on_c = _summary("raycolloc", 108.0, "GPU-b1,GPU-b2"), _summary("raycolloc", 100.0, "GPU-c1,GPU-c2")
    simulated = _summary("carma", 150.0, "")
    runs = [host_a, host_b, on_b, on_c, simulated]
    assert baseline(on_b, runs) is host_b and baseline(on_c, runs) is host_a and baseline(simulated, runs) is host_a
    assert same_gpus(on_b, host_b) and not same_gpus(on_c, host_a) and same_gpus(simulated, host_a)
    lines = format_policies(runs, ["exclusive", "exclusive#2", "raycolloc", "raycolloc#2", "carma"]).splitlines()
    row = {line.split()[0]: line.split() for line in lines[2:-1]}
    assert row["raycolloc"][2] == "0.60x" and row["raycolloc"][6] == "0.60x"  # 108 / 180, not / 200
    assert row["raycolloc#2"][2] == "0.50x*" and row["carma"][2] == "0.75x"
    assert lines[-1].startswith("* against an exclusive run on other GPUs")
    assert "*" not in format_policies([host_b, on_b])
