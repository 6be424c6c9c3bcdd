"""Every number the queue takes from its user, swept (issue 47, the generated test; the config keys'
sweep is ``tests/test_malformed_inputs.py``'s): each numeric column of a trace (the CSV ``replay``
reads), each numeric field of a submission (the ``queue submit`` flags, and the Python API,
``QueueService.submit``) and each numeric flag of ``queue trace``, with ``nan``, ``inf``, ``-inf``,
``-1``, ``0`` and ``1e300``. Each is refused naming the column, field or flag (exit 2; a typed error
from the API), or accepted as ``ACCEPTED`` documents, a reason each. A column, submission flag or trace
flag added later fails ``test_every_numeric_input_is_swept`` until it is swept here too."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from raycolloc.queue.__main__ import _parser, main
from raycolloc.queue.commands import _SUBMIT_FIELDS
from raycolloc.queue.service import QueueService
from raycolloc.queue.settings import compose_settings
from raycolloc.queue.trace import FIELDS, TraceError, read_trace

VALUES = ("nan", "inf", "-inf", "-1", "0", "1e300")
TEXT_COLUMNS = ("job_id", "kind", "model", "dataset", "entry")
NUMERIC_COLUMNS = ("submit_s", "epochs", "samples", "max_slowdown")
SUBMITTED = tuple(c for c in NUMERIC_COLUMNS if c != "submit_s")  # a submission arrives now: no submit_s
TRACE_FLAGS = ("jobs", "seed")
# (where, name, value) -> why it is accepted. Everything else is refused by name.
ACCEPTED = {
    ("trace", "submit_s", "0"): "a job may arrive the moment the trace starts (docs/queue.md: 0 to 1e7 s)",
    ("trace flag", "seed", "-1"): "any integer seeds the generator (random.Random takes negatives)",
    ("trace flag", "seed", "0"): "any integer seeds the generator; 0 is --seed's default",
}
ROWS = {  # each numeric column given ``{}``, in a row that is valid otherwise
    "submit_s": "j1,{},timm,resnet18,cifar10,,,1000,",
    "epochs": "j1,0,timm,resnet18,cifar10,,{},,",
    "samples": "j1,0,timm,resnet18,cifar10,,,{},",
    "max_slowdown": "j1,0,timm,resnet18,cifar10,,,1000,{}",
}


def _exit(argv: list[str]) -> int:
    """``python -m raycolloc.queue ARGV``'s exit status (argparse's own refusals included: exit 2)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _flags(command: str) -> set[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {a.dest for a in parser._actions if a.option_strings and a.dest != "help"}


def test_every_numeric_input_is_swept() -> None:
    assert set(FIELDS) == set(TEXT_COLUMNS) | set(NUMERIC_COLUMNS)
    assert _flags("submit") == set(_SUBMIT_FIELDS) and set(SUBMITTED) <= set(_SUBMIT_FIELDS)
    assert set(_SUBMIT_FIELDS) - set(SUBMITTED) == set(TEXT_COLUMNS)  # the others are text
    assert _flags("trace") - {"out"} == set(TRACE_FLAGS)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("column", NUMERIC_COLUMNS)
def test_each_numeric_trace_column(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(f"{','.join(FIELDS)}\n{ROWS[column].format(value)}\n")
    out = tmp_path / "out"
    code = _exit(["replay", str(trace), "cluster=local", f"out_dir={out}"])
    err = capsys.readouterr().err
    if ("trace", column, value) in ACCEPTED:
        assert code == 0, err
        return
    assert code == 2 and f"t.csv:2: {column}: " in err and "Traceback" not in err, err
    assert not out.exists()  # refused before any state was made
    with pytest.raises(TraceError, match=rf"t.csv:2: {column}: "):
        read_trace(trace)


def _submission(flag: str, value: str) -> dict[str, str]:
    fields = {"job_id": "a", "kind": "timm", "model": "resnet18", "dataset": "cifar10", "samples": "1000"}
    if flag == "epochs":
        del fields["samples"]
    return {**fields, flag: value}


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("field", SUBMITTED)
def test_each_numeric_submit_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str) -> None:
    fields = _submission(field, value)
    argv = ["submit", *(f"--{k.replace('_', '-')}={v}" for k, v in fields.items()), f"out_dir={tmp_path}"]
    code = _exit(argv)
    err = capsys.readouterr().err
    # Refused before the live queue is looked for: there is none here, and it is not asked (exit 1 would say so).
    assert code == 2 and f"submission: {field}: " in err and "Traceback" not in err, err
    assert "no live queue" not in err


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueueService]:
    settings = compose_settings(["cluster=local", "cluster.num_gpus=2"])
    service = QueueService(settings, tmp_path_factory.mktemp("live") / "live.sqlite", lambda: 0.0)
    yield service
    service.close()


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("field", SUBMITTED)
def test_each_numeric_submission_field_of_the_python_api(service: QueueService, field: str, value: str) -> None:
    with pytest.raises(TraceError, match=rf"^submission: {field}: "):
        service.submit(_submission(field, value))
    assert sum(service.store.counts().values()) == 0  # nothing queued


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("flag", TRACE_FLAGS)
def test_each_numeric_trace_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    out = tmp_path / "t.csv"
    given = {"jobs": "3", "seed": "0", flag: value}
    code = _exit(["trace", f"--jobs={given['jobs']}", f"--seed={given['seed']}", f"--out={out}", "cluster=local"])
    err = capsys.readouterr().err
    if ("trace flag", flag, value) in ACCEPTED:
        assert code == 0 and len(read_trace(out)) == 3, err
        return
    # argparse's refusal ("argument --jobs: invalid int value") or the queue's ("--jobs=0 is not allowed")
    assert code == 2 and (f"argument --{flag}: " in err or f"--{flag}={value} is not allowed" in err), err
    assert "Traceback" not in err and not out.exists()
