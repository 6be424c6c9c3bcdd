"""Every number a user gives is refused by name or accepted as documented (issue 47).

Generated from the schemas themselves: every int and float field of every config group (the dataclasses
:class:`~raycolloc.config.Config` holds, found through their type hints, a mix job's too), and every
numeric advisor key through the advisor's own argument parsing, is tried with NaN, the infinities, -1,
0 and 1e300 (an integer field with a 31-digit integer as well). Each must be a :class:`ConfigError`
naming the full key (``queue.max_slowdown=nan is not allowed; ...``) or sit in an acceptance table
below, with the reason. A new field is covered the day it is added; an ``Any`` field must say whether
it takes a number. Dataclasses are built directly: no Hydra, no Ray, a few hundred cases in a second.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raycolloc.advise.__main__ import _parser
from raycolloc.advise.__main__ import main as advise_main
from raycolloc.advise.rank import DEFAULT_DEGREES
from raycolloc.advise.run import ADVISOR_KEYS, ADVISOR_RANGES, parse_request
from raycolloc.config import Config, ConfigError

VALUES: tuple[Any, ...] = (math.nan, math.inf, -math.inf, -1, 0, 1e300)
HUGE_INT = 10**30  # past every integer bound (int64 too): a count that would overflow a column or a loop

# ``Any`` fields that take a number: (the other keys a value needs to be read, int or float).
NUMERIC_ANY: dict[str, tuple[dict[str, Any], type]] = {
    "min_epoch_s": ({}, float),  # or auto / null
    "repeats": ({}, int),  # or auto
    "mode.active_thread_percentage": ({"name": "mps"}, int),  # or a list, one per job; MPS only
}
# ``Any`` fields that take no number, and what they take.
NOT_NUMERIC_ANY: dict[str, str] = {
    "mode.pinned_mem_limit": "a size such as 8G (checked by is_mem_limit)",
    "mig.layout": "auto or a list of MIG profile names",
    "cluster.sim_inject": "names of injections",
    "mix.mig_layout": "a list of MIG profile names",
    "workload.args": "a mapping handed to the user's function",
    "workload.env": "a mapping of environment variables (strings)",
    "mix.jobs[].workload": "a preset's name or a composition",
}
# Values that are valid, and why (every other value tried must be refused by name).
ACCEPTED: dict[tuple[str, Any], str] = {
    ("seed", 0): "the default seed",
    ("queue.carma_seed", 0): "the default seed of GPUMemNet's error per workload",
    ("queue.sim_startup_s", 0): "the default: a simulated job's process shows on its GPU at once",
    ("repeat", 0): "the first run's index",
    ("min_epoch_s", 0): "no floor, as null",
    ("data.num_workers", 0): "batches are loaded in the training process itself",
    ("trainer.num_cpus", 0): "the trainer actor reserves no core (Ray's num_cpus=0)",
    ("trainer.fault_job", 0): "the cell's first job",
    ("workload.lr", 0): "a rate measured without moving the weights: every step does the same work",
    ("measure.budget", 0): "no runs beyond the first pass",
    ("queue.aging_s", 0): "a waiting job is never overtaken",
    ("queue.slowdown_margin", 0): "the model's predicted slowdown taken as it is",
    ("queue.min_gain", 0): "any gain lets a job join a busy GPU",
    ("queue.sim_mem_error", 0): "simulated jobs use exactly their estimate",
    ("queue.sim_oom_after_s", 0): "a simulated OOM strikes as the job starts",
    ("queue.arrival_scale", 0): "every job of a ray replay arrives at once",
    ("queue.trace_mix", 0): "no jobs of that class (the other two shares are not 0)",
}


@dataclasses.dataclass(frozen=True)
class NumberField:
    """One numeric key: its full name, its kind, and how to build its schema with a value in it."""

    key: str
    kind: type
    build: Callable[[Any], object]


def _bare(hint: Any) -> tuple[Any, Any]:
    """A type hint without ``| None``: (its origin or itself, its first argument where it has one)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, type(int | None)) and len(args) == 1:
        hint = args[0]
    origin = typing.get_origin(hint) or hint
    inner = typing.get_args(hint)
    return origin, inner[0] if inner else None


def _fields(schema: type, prefix: str) -> Iterator[NumberField]:
    """Every numeric field of ``schema`` and of the schemas it holds, with its full key."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        origin, inner = _bare(hint)
        if dataclasses.is_dataclass(origin):
            yield from _fields(origin, f"{key}.")
        elif origin is list and dataclasses.is_dataclass(inner):
            yield from _fields(inner, f"{key}[].")
        elif origin in (int, float):
            yield NumberField(key, origin, _builder(schema, f.name, {}))
        elif origin is list and inner is float:  # shares: the first of three, the others 1
            yield NumberField(key, float, lambda v, s=schema, n=f.name: s(**{n: [v, 1.0, 1.0]}))
        elif hint is Any:
            assert key in NUMERIC_ANY or key in NOT_NUMERIC_ANY, f"{key}: Any; say whether it takes a number"
            if key in NUMERIC_ANY:
                given, kind = NUMERIC_ANY[key]
                yield NumberField(key, kind, _builder(schema, f.name, given))


def _builder(schema: type, name: str, given: dict[str, Any]) -> Callable[[Any], object]:
    return lambda value: schema(**{**given, name: value})


FIELDS = list(_fields(Config, ""))


def _cases() -> Iterator[Any]:
    for field in FIELDS:
        for value in (*VALUES, *((HUGE_INT,) if field.kind is int else ())):
            yield pytest.param(field, value, id=f"{field.key}={value!r}"[:60])


def test_every_group_and_the_keys_of_the_issue_are_walked() -> None:
    keys = {f.key for f in FIELDS}
    groups = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    assert groups >= {"workload", "mode", "cluster", "data", "trainer", "telemetry", "measure", "queue", "mix.jobs[]"}
    issue = {"trainer.num_cpus", "epoch_time_s", "trainer.stall_timeout_s", "cluster.lease_timeout_s", "workload.lr"}
    issue |= {"trainer.epoch_timeout_s", "queue.max_slowdown", "queue.oom_backoff", "queue.aging_s"}
    issue |= {"queue.trace_gap_s", "queue.arrival_scale"}
    assert issue <= keys, sorted(issue - keys)
    assert {key for key, _ in ACCEPTED} <= keys, "an acceptance of a key that is not walked"


@pytest.mark.parametrize(("field", "value"), list(_cases()))
def test_a_config_number_is_refused_by_name_or_documented(field: NumberField, value: Any) -> None:
    try:
        field.build(value)
    except ConfigError as exc:
        assert (field.key, value) not in ACCEPTED, f"{field.key}={value!r} is documented as valid: {exc}"
        assert f"{field.key}=" in str(exc), f"the message does not name {field.key}: {exc}"
        assert "is not allowed" in str(exc), str(exc)
        return
    assert (field.key, value) in ACCEPTED, f"{field.key}={value!r} was accepted; refuse it or say why it is valid"


# --- the advisor's keys, through its own argument parsing ---------------------------------------------

ADVISOR_TEXTS = ("nan", "inf", "-inf", "-1", "0", "1e300", "1" * 31)
ADVISOR_ACCEPTED: dict[tuple[str, str], str] = {}  # every value tried is out of range for every key


def test_every_advisor_key_is_a_number_with_a_range() -> None:
    assert set(ADVISOR_RANGES) == set(ADVISOR_KEYS)


@pytest.mark.parametrize("text", ADVISOR_TEXTS)
@pytest.mark.parametrize("key", ADVISOR_KEYS)
def test_an_advisor_number_is_refused_by_name(key: str, text: str) -> None:
    args = _parser().parse_intermixed_args(["workload=tiny_cnn", "cluster=local", f"{key}={text}"])
    try:
        parse_request(args.words, DEFAULT_DEGREES)
    except ConfigError as exc:
        assert f"{key}=" in str(exc) and "is not allowed" in str(exc), str(exc)
        low, high = ADVISOR_RANGES[key]
        assert f"{low:g}.." in str(exc), f"the message does not say the range: {exc}"
        return
    assert (key, text) in ADVISOR_ACCEPTED, f"{key}={text} was accepted"


@pytest.mark.parametrize(
    ("words", "needle"),
    [
        (["max_slowdown=nan"], "max_slowdown=nan is not allowed; it must be a number 1..1000000"),
        (["max_slowdown=0.5"], "max_slowdown=0.5 is not allowed; it must be a number 1..1000000"),
        (["confirm_budget_s=nan"], "confirm_budget_s=nan is not allowed; it must be a number of seconds 1..10000000"),
    ],
    ids=["max-slowdown-nan", "max-slowdown-below-1", "confirm-budget-nan"],
)
def test_item_10_the_advisor_command_exits_2_naming_the_key(
    words: list[str], needle: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 47, item 10: ``max_slowdown=nan`` advised "slowdown <= nan: none fits", ``max_slowdown=0.5``
    (below the queue's bound of 1) and ``confirm_budget_s=nan`` were taken: exit 0."""
    with caplog.at_level(logging.ERROR, logger="raycolloc"):
        code = advise_main(["workload=tiny_cnn", "cluster=local", "epoch_samples=256", "batch_size=32", *words])
    assert code == 2
    assert needle in caplog.text, caplog.text


def test_the_validate_form_reads_cores_as_the_advise_form(caplog: pytest.LogCaptureFixture, tmp_path: Any) -> None:
    with caplog.at_level(logging.ERROR, logger="raycolloc"):
        code = advise_main(["cores=nan", "--validate", str(tmp_path)])
    assert code == 2 and "cores='nan' is not allowed; it must be an integer 1..4096" in caplog.text, caplog.text


# --- the queue's numbers, through its command line (issue 47, items 4 and 9: config level) ------------


@pytest.mark.parametrize(
    ("words", "needle"),
    [
        (
            ["queue.trace_gap_s=inf"],
            "queue.trace_gap_s=inf is not allowed; it must be a number of seconds 0.001..86400",
        ),
        (["queue.trace_gap_s=nan"], "queue.trace_gap_s=nan is not allowed"),
        (["queue.trace_gap_s=1e300"], "queue.trace_gap_s=1e+300 is not allowed"),
    ],
    ids=["gap-inf", "gap-nan", "gap-1e300"],
)
def test_item_4_a_trace_of_an_infinite_gap_is_refused_naming_the_key(
    words: list[str], needle: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47, item 4: ``queue trace ... queue.trace_gap_s=inf`` raised ZeroDivisionError; ``=nan``
    wrote ``submit_s=nan`` rows that ``replay`` then refused; ``=1e300`` a trace no replay reads."""
    from raycolloc.queue.__main__ import main as queue_main

    out = tmp_path / "t.csv"
    code = queue_main(["trace", "--jobs", "5", "--out", str(out), *words])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "words",
    [
        ["queue.max_slowdown=nan"],
        ["queue.oom_backoff=nan"],
        ["queue.aging_s=nan"],
        ["queue.aging_s=1e300"],
        ["queue.runner=ray", "queue.arrival_scale=nan", "queue.stand_in=tiny_cnn"],
    ],
    ids=["max-slowdown", "oom-backoff", "aging", "aging-1e300", "arrival-scale"],
)
def test_item_9_a_replay_of_a_nan_setting_is_refused_before_it_starts(
    words: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47, items 9 and 5 (the setting): ``replay`` with NaN settings exited 0, and ``arrival_scale=nan``
    profiled for 37 s, then failed inside SQLite leaving its database behind."""
    from raycolloc.queue.__main__ import main as queue_main

    trace, out = tmp_path / "t.csv", tmp_path / "out"
    assert queue_main(["trace", "--jobs", "3", "--out", str(trace)]) == 0
    capsys.readouterr()
    code = queue_main(["replay", str(trace), f"out_dir={out}", *words])
    err = capsys.readouterr().err
    key = next(w for w in words if "nan" in w or "1e300" in w).split("=")[0]
    assert code == 2 and f"{key}=" in err and "is not allowed" in err, err
    assert not out.exists(), sorted(map(str, out.rglob("*")))
