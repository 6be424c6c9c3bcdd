"""A trace's input read strictly (issue 33, review item 12): a column named twice, a field over the CSV
reader's limit, numbers other than plain finite decimals and a quote left open are refused by line and
column with exit 2, nothing queued; python and script jobs are checked as a sweep's workloads are,
then refused with the reason (the queue has profiles only of timm models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raycolloc.queue.__main__ import main
from raycolloc.queue.trace import FIELDS, TraceError, parse_row, read_trace

HEADER = ",".join(FIELDS)
GOOD = "j1,0.5,timm,resnet50,imagenet64,,,1000,2"
HUGE = "x" * 200_000  # over the csv module's default field limit (131,072)


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        ("job_id,submit_s,kind,kind\nj1,0,timm,timm\n", "bad.csv:1", "kind"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,{HUGE},imagenet64,,,10,\n", "bad.csv:3", "model"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,,,1_0,\n", "bad.csv:3", "samples"),
        (f"{HEADER}\n{GOOD}\nj2,1_0,timm,resnet50,imagenet64,,,10,\n", "bad.csv:3", "submit_s"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,,,10,inf\n", "bad.csv:3", "max_slowdown"),
        (f"{HEADER}\n{GOOD}\nj2,1e3,timm,resnet50,imagenet64,,,10,\n", "bad.csv:3", "submit_s"),
        (f"{HEADER}\n{GOOD}\nj2,infinity,timm,resnet50,imagenet64,,,10,\n", "bad.csv:3", "submit_s"),
        # The quote opens on line 3 and swallows line 4: line 3 is named, at the column it opens in.
        (
            f'{HEADER}\n{GOOD}\nj2,1,"timm,resnet50,imagenet64,,,10,\nj3,2,timm,resnet50,imagenet64,,,10,\n',
            "bad.csv:3",
            "kind",
        ),
        (f"{HEADER}\n{GOOD}\nj2,1,script,,,python 'train.py,,10,\n", "bad.csv:3", "entry"),
        # Review items 3, 4, 11: numbers float() makes infinite or past the bounds; a quote open on the
        # last line (at its last column, and at a column before the length); an entry on a timm row.
        (f"{HEADER}\n{GOOD}\nj2,{'9' * 320},timm,resnet50,imagenet64,,,10,\n", "bad.csv:3", "submit_s"),
        (f"{HEADER}\n{GOOD}\nj2,20000000,timm,resnet50,imagenet64,,,10,\n", "bad.csv:3", "submit_s"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,,,{10**29},\n", "bad.csv:3", "samples"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,cifar10,,{10**7},,\n", "bad.csv:3", "epochs"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,,,10,{'9' * 320}\n", "bad.csv:3", "max_slowdown"),
        (f'{HEADER}\n{GOOD}\nj2,0,timm,resnet18,cifar10,,,1000,"2', "bad.csv:3", "max_slowdown"),
        (f'{HEADER}\n{GOOD}\nj2,0,timm,resnet18,"cifar10,,,1000,2\n', "bad.csv:3", "dataset"),
        (f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,mypkg.train:main,,10,\n", "bad.csv:3", "entry"),
    ],
)
def test_bad_input_is_refused_by_line_and_column_with_exit_2_and_nothing_queued(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str, field: str
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(text)
    with pytest.raises(TraceError, match=rf"{where}: {field}:"):
        read_trace(trace)
    out = tmp_path / "out"
    assert main(["replay", str(trace), f"out_dir={out}", "cluster=local"]) == 2
    err = capsys.readouterr().err
    assert f"{where}: {field}:" in err and "Traceback" not in err
    assert not out.exists()  # nothing queued: no state database was even made


def test_plain_decimals_are_read() -> None:
    row = {"job_id": "a", "submit_s": "12.", "kind": "timm", "model": "resnet50", "dataset": "imagenet64"}
    job = parse_row({**row, "samples": "007", "max_slowdown": "1.50"}, "x")
    assert (job.submit_s, job.samples, job.max_slowdown) == (12.0, 7, 1.5)


def test_a_blank_line_and_a_quoted_cell_do_not_shift_lines(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f'{HEADER}\n{GOOD}\n\nj2,1,"timm",resnet50,imagenet64,,,10,1.5\n')
    jobs = read_trace(trace)
    assert [(j.job_id, j.kind, j.max_slowdown) for j in jobs] == [("j1", "timm", 2.0), ("j2", "timm", 1.5)]
    trace.write_text(f"{HEADER}\n{GOOD}\n\nj2,1,timm,resnet50,imagenet64,,,10,nan\n")
    with pytest.raises(TraceError, match=r"t.csv:4: max_slowdown:"):
        read_trace(trace)


def test_a_python_or_script_row_is_read_and_refused_where_profiles_are_catalogued_only() -> None:
    from raycolloc.queue.trace import refuse_unprofiled_kind

    row = {"job_id": "a", "submit_s": "0", "kind": "python", "entry": "mypkg.train:main", "samples": "10"}
    job = parse_row(row, "submission")  # well formed: a live queue on Ray runs it (tests/test_queue_live_ray.py)
    assert (job.kind, job.entry, job.workload) == ("python", "mypkg.train:main", "python:mypkg.train:main")
    script = parse_row({**row, "kind": "script", "entry": "python train.py --epochs 2"}, "submission")
    assert script.workload == "script:python train.py --epochs 2"
    for queued in (job, script):
        with pytest.raises(TraceError, match=rf"submission: kind: kind={queued.kind} is well formed but cannot be "):
            refuse_unprofiled_kind(queued, "submission")
    with pytest.raises(TraceError, match=r"submission: entry: 'not an entry' is not package.module:function"):
        parse_row({**row, "entry": "not an entry"}, "submission")


def test_the_simulated_live_queue_and_a_replay_refuse_a_python_job_by_its_kind(tmp_path: Path) -> None:
    from raycolloc.queue.service import QueueService
    from raycolloc.queue.settings import compose_settings

    service = QueueService(compose_settings(["cluster=local"]), tmp_path / "live.sqlite")
    try:
        with pytest.raises(TraceError, match=r"^submission: kind: kind=python .* serve queue.runner=ray"):
            service.submit({"job_id": "a", "kind": "python", "entry": "mypkg.train:main", "samples": "10"})
        assert sum(service.store.counts().values()) == 0
    finally:
        service.close()
    trace = tmp_path / "t.csv"
    trace.write_text(f"{HEADER}\n{GOOD}\nj2,1,script,,,python train.py,,10,\n")
    assert main(["replay", str(trace), f"out_dir={tmp_path / 'out'}", "cluster=local"]) == 2
    assert not (tmp_path / "out").exists()  # refused before a database was made


def test_a_byte_order_mark_is_skipped_and_bytes_not_utf8_are_named_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(f"\ufeff{HEADER}\n{GOOD}\n".encode())
    assert [j.job_id for j in read_trace(trace)] == ["j1"]
    trace.write_bytes(f"{HEADER}\n{GOOD}\nj2,1,timm,resnet50,imagenet64,,,10,\n".encode().replace(b"j2", b"j\xff"))
    with pytest.raises(TraceError, match=r"t.csv:3: file: not UTF-8"):
        read_trace(trace)
    assert main(["replay", str(trace), f"out_dir={tmp_path / 'out'}", "cluster=local"]) == 2
    err = capsys.readouterr().err
    assert "t.csv:3: file: not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("last", "field"),
    [('j2,0,timm,resnet18,cifar10,,,1000,"2', "max_slowdown"), ('j2,0,timm,resnet18,"\n', "dataset")],
)
def test_a_quote_open_on_the_last_line_is_refused_for_that_reason(tmp_path: Path, last: str, field: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f"{HEADER}\n{GOOD}\n{last}")
    with pytest.raises(TraceError, match=rf"t.csv:3: {field}: a quote is opened and not closed on this line"):
        read_trace(trace)


# --- issue 47 -------------------------------------------------------------------------------------------


def test_a_trace_cut_inside_its_last_number_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "cut.csv"
    trace.write_text(f"{HEADER}\n{GOOD}\nj2,0,timm,resnet18,cifar10,,,817")  # 8170 samples, cut short
    with pytest.raises(TraceError, match=r"cut.csv:3: row: the file ends inside this line"):
        read_trace(trace)
    out = tmp_path / "out"
    assert main(["replay", str(trace), f"out_dir={out}", "cluster=local"]) == 2
    err = capsys.readouterr().err
    assert "cut.csv:3: row: the file ends inside this line" in err and "Traceback" not in err
    assert not out.exists()
    trace.write_text(f"{HEADER}\r\n{GOOD}\r\nj2,0,timm,resnet18,cifar10,,,817\r\n")  # whole (CRLF, as written)
    assert [j.samples for j in read_trace(trace)] == [817, 1000]


def _trace_cmd(tmp_path: Path, out: str, *words: str, jobs: str = "5") -> list[str]:
    return ["trace", "--jobs", jobs, "--out", out, f"out_dir={tmp_path / 'o'}", *words]


@pytest.mark.parametrize("where", ["directory", "folder that cannot be made", "folder that is a file"])
def test_trace_out_that_cannot_take_a_trace_exits_2_naming_it_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    out = {
        "directory": str(tmp_path / "adir"),
        "folder that cannot be made": "/proc/nope/t.csv",
        "folder that is a file": str(tmp_path / "afile" / "t.csv"),
    }[where]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(_trace_cmd(tmp_path, out)) == 2
    err = capsys.readouterr().err
    assert f"error: --out={out} " in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no .tmp file, no folder made


def test_a_write_that_fails_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from raycolloc.queue.trace import TraceOutError, write_trace

    def full(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", full)
    with pytest.raises(TraceOutError, match=r"--out=.*t.csv cannot be written \(OSError: \[Errno 28\]"):
        write_trace(tmp_path / "t.csv", [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("jobs", "words", "named"),
    [
        ("1000000000", [], "--jobs=1000000000 is not allowed; it must be an integer from 1 to 100,000"),
        ("100001", [], "--jobs=100001 is not allowed"),
        # each gap within the config's range (a day), their sum past the 1e7 s a replay takes
        ("1000", ["queue.trace_gap_s=86400"], "queue.trace_gap_s=86400 is not allowed here: a job would arrive"),
        (
            "1000",
            ["queue.trace_gap_s=1e300"],
            "queue.trace_gap_s=1e+300 is not allowed; it must be a number of seconds",
        ),
        ("5", ["queue.trace_job_s=1e300"], "queue.trace_job_s=1e+300 is not allowed; it must be a number of seconds"),
    ],
)
def test_a_trace_too_large_to_write_or_replay_is_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str, words: list[str], named: str
) -> None:
    import time

    out = tmp_path / "t.csv"
    start = time.monotonic()
    assert main(_trace_cmd(tmp_path, str(out), *words, jobs=jobs)) == 2
    assert time.monotonic() - start < 30  # it hung for over 120 s drawing a billion jobs
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / ".t.csv.tmp").exists()


@pytest.mark.parametrize(
    ("scale", "named"),
    [
        ("nan", "queue.arrival_scale=nan is not allowed"),
        ("1e300", "queue.arrival_scale=1e+300 is not allowed; it must be a number 0..100"),
    ],
)
def test_a_ray_replay_with_an_arrival_scale_it_cannot_keep_is_refused_before_ray_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scale: str, named: str
) -> None:
    import ray

    trace = tmp_path / "tr.csv"
    trace.write_text(f"{HEADER}\n{GOOD}\n")
    out = tmp_path / "out"
    connected = ray.is_initialized()  # the session's instance, where an earlier test of this worker started it
    words = ["queue.runner=ray", f"queue.arrival_scale={scale}", "queue.stand_in=tiny_cnn", "cluster=local"]
    assert main(["replay", str(trace), *words, f"out_dir={out}"]) == 2  # it profiled for 37 s, then a traceback
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not out.exists() and ray.is_initialized() == connected  # no queue.sqlite, no lock; Ray not started
