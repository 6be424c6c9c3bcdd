"""The queue's traces: generated the same for a seed, read back as written, and a malformed one refused
whole, by line and field, with exit 2 (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.catalog import CATALOG, catalog_profile, sim_gpu
from raycolloc.queue.trace import FIELDS, TraceError, read_trace

HEADER = ",".join(FIELDS)
GOOD = "j1,0.5,timm,resnet50,imagenet64,,,1000,2"


def test_the_generator_writes_the_same_trace_for_a_seed_and_the_reader_reads_it_back(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in ("a.csv", "b.csv", "c.csv"))
    assert main(["trace", "--jobs", "60", "--seed", "3", "--out", str(a)]) == 0
    assert main(["trace", "--jobs", "60", "--seed", "3", "--out", str(b)]) == 0
    assert main(["trace", "--jobs", "60", "--seed", "4", "--out", str(c)]) == 0
    assert a.read_text() == b.read_text() != c.read_text()
    jobs = read_trace(a)
    assert len(jobs) == 60 and len({j.job_id for j in jobs}) == 60
    assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)
    sizes = {CATALOG[j.workload].size for j in jobs}
    assert sizes == {"light", "medium", "heavy"}
    assert any(j.max_slowdown for j in jobs) and any(j.max_slowdown is None for j in jobs)
    gpu = sim_gpu("H100-80GB")
    alone = [j.samples / catalog_profile(j.workload, gpu).samples_per_s for j in jobs if j.samples]
    # Sized so that 60 jobs one per GPU on 4 GPUs end within minutes (the ten).
    assert sum(alone) / 4 < 600 and max(alone) < 4 * 25 * 1.6 + 1


def test_trace_lengths_follow_the_gpu_model(tmp_path: Path) -> None:
    h100, a100 = tmp_path / "h.csv", tmp_path / "a.csv"
    assert main(["trace", "--jobs", "5", "--out", str(h100)]) == 0
    assert main(["trace", "--jobs", "5", "--out", str(a100), "cluster=local", "cluster.gpu_model=A100-SXM4-40GB"]) == 0
    slow, fast = read_trace(a100), read_trace(h100)
    assert all((s.samples or 0) < (f.samples or 0) for s, f in zip(slow, fast, strict=True))


@pytest.mark.parametrize(
    ("rows", "line", "field"),
    [
        (["j1,0.5,timm,resnet50,imagenet64,,,1000,2", "j2,-1,timm,resnet50,imagenet64,,,1000,"], 3, "submit_s"),
        ([GOOD, "j2,1,torch,resnet50,imagenet64,,,1000,"], 3, "kind"),
        ([GOOD, "j2,1,timm,,imagenet64,,,1000,"], 3, "model"),
        ([GOOD, "j2,1,timm,resnet50,mnist,,,1000,"], 3, "dataset"),
        ([GOOD, "j2,1,timm,resnet50,imagenet64,,2,1000,"], 3, "epochs/samples"),
        ([GOOD, "j2,1,timm,resnet50,imagenet64,,,,"], 3, "epochs/samples"),
        ([GOOD, "j2,1,timm,resnet50,imagenet64,,,ten,"], 3, "samples"),
        ([GOOD, "j2,1,timm,resnet50,imagenet64,,,10,0.5"], 3, "max_slowdown"),
        ([GOOD, "j1,1,timm,resnet50,imagenet64,,,10,"], 3, "job_id"),
        ([GOOD, "j 2,1,timm,resnet50,imagenet64,,,10,"], 3, "job_id"),
        ([GOOD, "j2,1,python,,,,,10,"], 3, "entry"),
        ([GOOD, "j2,1,python,,,not an entry,,10,"], 3, "entry"),
        ([GOOD, "j2,nan,timm,resnet50,imagenet64,,,10,"], 3, "submit_s"),
        ([GOOD, "j2,1,timm,resnet50,imagenet64,,,10,,extra"], 3, "row"),
    ],
)
def test_a_malformed_trace_is_refused_by_line_and_field_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[str], line: int, field: str
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(TraceError, match=rf"bad.csv:{line}: {field}:"):
        read_trace(trace)
    out = tmp_path / "out"
    assert main(["replay", str(trace), f"out_dir={out}", "cluster=local"]) == 2
    assert f"bad.csv:{line}: {field}:" in capsys.readouterr().err
    assert not out.exists()  # nothing queued: no state database was even made


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ("", "bad.csv:1", "header"),
        ("job_id,submit_s,kind,colour\n", "bad.csv:1", "colour"),
        ("job_id,kind\nj1,timm\n", "bad.csv:1", "submit_s"),
        (HEADER + "\n", "bad.csv", "rows"),
    ],
)
def test_a_trace_with_a_bad_header_or_no_rows_is_refused(tmp_path: Path, text: str, where: str, field: str) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(text)
    with pytest.raises(TraceError, match=rf"{where}: {field}:"):
        read_trace(trace)


def test_a_missing_trace_file_and_a_bad_override_exit_2(tmp_path: Path) -> None:
    assert main(["replay", str(tmp_path / "none.csv"), f"out_dir={tmp_path}"]) == 2
    assert main(["trace", "--jobs", "3", "--out", str(tmp_path / "t.csv"), "queue.policy=fifo"]) == 2
    assert main(["trace", "--jobs", "0", "--out", str(tmp_path / "t.csv")]) == 2
    assert not (tmp_path / "t.csv").exists()


def test_a_job_the_simulated_cluster_has_no_profile_of_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f"{HEADER}\n{GOOD}\nj2,1,timm,resnet9000,imagenet64,,,10,\n")
    assert main(["replay", str(trace), f"out_dir={tmp_path / 'out'}", "cluster=local"]) == 2
    assert "job j2: model: no profile of resnet9000/imagenet64" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_replay_prints_the_summary_and_writes_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    assert main(["trace", "--jobs", "12", "--out", str(trace), "cluster=local", "cluster.num_gpus=2"]) == 0
    words = ["cluster=local", "cluster.num_gpus=2", f"out_dir={tmp_path}", "queue.policy=carma"]
    assert main(["replay", str(trace), *words]) == 0
    out = capsys.readouterr().out
    assert "queue policy=carma: 12/12 jobs ended" in out and "makespan" in out and "p95" in out and "OOMs" in out
    run = tmp_path / "queue" / "t-carma-1x2-H100-80GB"  # trace, policy and cluster: one node of 2 H100s
    assert {"queue.sqlite", "jobs.parquet", "gpus.parquet", "summary.json"} <= {p.name for p in run.iterdir()}
    first = json.loads((run / "summary.json").read_text())
    assert main(["replay", str(trace), *words]) == 0  # over already: nothing runs, nothing is lost
    again = json.loads((run / "summary.json").read_text())
    assert {k: v for k, v in again.items() if k != "wall_s"} == {k: v for k, v in first.items() if k != "wall_s"}
    assert first["energy_j"] > 0


def test_the_readme_replays_on_other_clusters_keep_apart_in_one_out_dir(tmp_path: Path) -> None:
    import shlex

    root = Path(__file__).resolve().parents[1]
    prefix = "python -m raycolloc.queue replay jobs/examples/queue_trace60.csv"
    commands = [line for line in (root / "README.md").read_text().splitlines() if line.startswith(prefix)]
    assert len(commands) == 2  # the 4-GPU one and the 8 x 8 one
    for command in commands:
        words = [w for w in shlex.split(command)[5:] if not w.startswith("queue.policy=")]
        trace = str(root / "jobs" / "examples" / "queue_trace60.csv")
        # The same policy on both clusters (the README's differ): only the cluster tells them apart.
        assert main(["replay", trace, *words, "queue.policy=carma", f"out_dir={tmp_path}"]) == 0
    runs = sorted(p.name for p in (tmp_path / "queue").iterdir())
    assert runs == ["queue_trace60-carma-1x4-H100-80GB", "queue_trace60-carma-8x8-H100-80GB"]
    assert all((tmp_path / "queue" / run / "summary.json").is_file() for run in runs)


def test_a_cancelled_job_is_counted_apart_and_makes_the_replay_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from raycolloc.queue import replay as replay_module
    from raycolloc.queue.report import format_summary, job_rows, summarise
    from raycolloc.queue.state import Store
    from raycolloc.queue.trace import TraceJob

    store = Store(tmp_path / "q.sqlite")
    jobs = [TraceJob(j, 0.0, "timm", "resnet50", "imagenet64", None, None, 1000, None) for j in ("a", "b")]
    store.add(jobs, [1.0, 1.0], 0.0, 2.0)
    attempt = store.place("a", "g0", "naive", 1.0)
    store.start("a", attempt, 1.0)
    store.end("a", attempt, 5.0)
    store.cancel("b", 2.0)  # e.g. the ray runner's, after MAX_FAILURES failed attempts
    summary = summarise("exclusive", job_rows("exclusive", store.jobs(), lambda job: 4.0, 2.0), None, 0.0)
    store.close()
    assert (summary.ended, summary.cancelled, summary.complete) == (1, 1, False)
    assert "1/2 jobs ended, 1 cancelled (NOT all: see jobs)" in format_summary(summary)
    outcome = replay_module.ReplayOutcome(summary, tmp_path, tmp_path / "jobs.parquet")
    monkeypatch.setattr(replay_module, "replay", lambda trace, settings: outcome)
    assert main(["replay", str(tmp_path / "t.csv"), "cluster=local"]) == 1
    assert "1 cancelled" in capsys.readouterr().out
