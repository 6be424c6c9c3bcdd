"""One row of a radT plan as a raycolloc job, with every column validated.

Rows are taken as researchers write them. A row whose ``File`` is a script of their own (it exists,
and is not timm's ``train.py``) runs as a script job: ``python FILE PARAMS``, unmodified. Any other
row trains the model its ``--model`` names (any timm model; the study's spellings too) on the
dataset its data directory holds, recognised from the directory's contents
(:func:`raycolloc.job.data.detect.detect_dataset`), from ``+plan_datasets={dir_name: dataset}``, from
its name where it is not on this machine (:func:`~raycolloc.job.data.detect.dataset_by_name`: the study's
``/raid/datasets/imagenet64_images/`` is ImageNet64, 64 px), or, with ``data.source=synthetic``, synthetic
images of the model's default shape. A model and dataset of one of the study's presets keep the preset's name.

Every error names the CSV line, the row (Experiment, Workload, Run) and the column.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from raycolloc.config_checks import MAX_EPOCHS, MAX_SAMPLES, ConfigError
from raycolloc.datasets import DATASETS
from raycolloc.driver.radt_data import (
    PlanError,
    Row,
    RowContext,
    data_path,
    plan_error,
    row_dataset,
)
from raycolloc.mode_kinds import BASELINE_MODE, mode_of, modes_where
from raycolloc.workload_config import WorkloadConfig

__all__ = ["COLUMNS", "PlanError", "PlanJob", "Row", "RowContext", "data_path", "parse_params", "parse_row", "row_mode"]

COLUMNS = ("Experiment", "Workload", "Status", "Run", "Devices", "Collocation", "File", "Listeners", "Params")
MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")
_STATUS = {"": "run", "PENDING": "run", "QUEUED": "run", "FINISHED": "finished", "FAILED": "failed"}
# radT's Collocation words for a mode ("nan": radT itself writes it back for an empty Collocation); a
# MIG profile (``1g.10gb``) names the partitioned mode.
_RADT_MODES = {
    "-": BASELINE_MODE,
    "": BASELINE_MODE,
    "nan": BASELINE_MODE,
    **{m: m for m in modes_where(lambda k: k.needs_daemon)},
}
_PARTITIONED = modes_where(lambda k: k.partitioned)[0]
_DEVICES = re.compile(r"^\d+(\+\d+)*$")
_LISTENER = re.compile(r"^[A-Za-z][\w-]*$")
# The study's spellings of timm models (torchvision's names), and the models a File's name hints at.
_ALIASES = {"efficientnetv2s": "efficientnetv2_s", "caitxxs24": "cait_xxs24_224"}
_HINTS = ("dlrm", "resnet26", "resnet50", "resnet152", "efficientnetv2_s", "cait_xxs24_224")
_MODEL_KEYS = {"model", "arch", "a"}
_BATCH_KEYS = {"batch_size", "b", "mini_batch_size"}
_EPOCH_KEYS = {"epochs", "nepochs"}
_DATA_KEYS = {"data", "data_dir", "dataset", "data_set", "data_path", "raw_data_file", "processed_data_file"}
_KV = re.compile(r"^[A-Za-z_][\w.-]*=")  # a "key=value" token is never a flag's value


def _norm(text: str) -> str:
    return re.sub(r"[-_.\s]", "", text.lower())


@dataclass(frozen=True)
class PlanJob:
    """One training job (one CSV row): a preset name or a composition, and how much it trains.

    ``kind`` is ``model`` (raycolloc trains it) or ``script`` (the row's File runs as written);
    ``data_dir`` is the row's data directory (its job's ``data.path`` with ``data.source=real``);
    ``note`` says what was assumed (e.g. synthetic data for an unrecognised directory), ``by_name``
    what its data directory's name alone told (the directory is not on this machine).
    """

    workload: str | WorkloadConfig
    run: str
    batch_size: int | None
    epochs: int | None
    mig_profile: str | None
    line: int
    extra: dict[str, str] = field(default_factory=dict)
    listeners: str = ""
    file: str = ""
    status: str = "run"
    kind: str = "model"
    data_dir: str | None = None
    note: str | None = None
    by_name: str | None = None


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.match(r"^-\d*\.?\d", token)


def parse_params(text: str) -> list[tuple[str, str]]:
    """Split ``--k v``, ``--k=v`` and ``k=v`` (also ``a=1,b=2``) into pairs."""
    tokens, i = shlex.split(text), 0
    pairs: list[tuple[str, str]] = []
    while i < len(tokens):
        tok = tokens[i]
        if _is_flag(tok):
            key = tok.lstrip("-")
            if "=" in key:
                name, _, value = key.partition("=")
                pairs.append((name, value))
            elif i + 1 < len(tokens) and not _is_flag(tokens[i + 1]) and not _KV.match(tokens[i + 1]):
                pairs.append((key, tokens[i + 1]))
                i += 1
            else:
                pairs.append((key, "true"))
        elif "=" in tok:
            parts = tok.split(",")
            chunks = parts if all("=" in p for p in parts) else [tok]  # radT's own "a=1,b=2"
            pairs.extend((k, v) for k, _, v in (c.partition("=") for c in chunks))
        else:
            pairs.append(("_positional", tok))
        i += 1
    return pairs


def row_mode(path: Path, row: Row) -> str:
    """The mode of the Collocation column: a MIG profile's partitioned mode, else radT's word for one."""
    colloc = row.f["Collocation"].lower()
    if colloc in _RADT_MODES:
        return _RADT_MODES[colloc]
    if MIG_PROFILE.match(colloc):
        return _PARTITIONED
    raise plan_error(
        path, row, "Collocation", f"unknown Collocation {colloc!r}", ["-", "(empty)", "MPS", MIG_PROFILE.pattern]
    )


def _status(path: Path, row: Row) -> str:
    word = row.f["Status"].split()[0].upper() if row.f["Status"].strip() else ""
    if word not in _STATUS:  # radT writes back e.g. "FINISHED run-name (0_A)": first word counts
        raise plan_error(path, row, "Status", f"unknown Status {row.f['Status']!r}", [s or "(empty)" for s in _STATUS])
    return _STATUS[word]


def _check_columns(path: Path, row: Row) -> None:
    f = row.f
    for column in ("Experiment", "Workload", "File"):
        if not f[column]:
            raise plan_error(path, row, column, "is empty; every row needs one")
    if not _DEVICES.match(f["Devices"]):
        raise plan_error(
            path, row, "Devices", f"{f['Devices']!r} is not a GPU index", ["0", "1", "0+1 (indices joined by +)"]
        )
    bad = [name for name in f["Listeners"].split("+") if f["Listeners"] and not _LISTENER.match(name)]
    if bad:
        raise plan_error(
            path,
            row,
            "Listeners",
            f"{bad[0]!r} is not a listener name (listeners are names joined by +, "
            "e.g. smi+dcgmi+top; raycolloc samples the GPU itself and records them)",
        )


def _fields(path: Path, row: Row) -> tuple[dict[str, str], dict[str, str], dict[str, int | None]]:
    """(recognised fields, other Params, batch and epochs as numbers) of a row's Params."""
    try:
        pairs = parse_params(row.f["Params"])
    except ValueError as exc:
        raise plan_error(path, row, "Params", f"cannot split {row.f['Params']!r}: {exc}") from None
    fields: dict[str, str] = {}
    extra: dict[str, str] = {}
    for key, value in pairs:
        k = key.lower().replace("-", "_")
        group = next(
            (
                g
                for g, ks in (
                    ("model", _MODEL_KEYS),
                    ("batch", _BATCH_KEYS),
                    ("epochs", _EPOCH_KEYS),
                    ("data", _DATA_KEYS),
                    ("workload", {"workload"}),
                )
                if k in ks
            ),
            None,
        )
        if group:
            fields[group] = value
        elif k == "_positional" and "data" not in fields and "/" in value:
            fields["data"] = value  # e.g. the PyTorch ImageNet example's positional DIR
        else:
            extra[key] = f"{extra[key]} {value}" if key in extra else value
    numbers: dict[str, int | None] = {}
    for name, least, most in (("batch", 1, MAX_SAMPLES), ("epochs", 1, MAX_EPOCHS)):
        raw = fields.get(name)
        try:
            number = numbers[name] = None if raw is None else int(raw)
        except ValueError:
            raise plan_error(path, row, "Params", f"{name} value {raw!r} is not an integer") from None
        if number is not None and number < least:
            raise plan_error(path, row, "Params", f"{name} value {raw!r} must be >= {least}")
        if number is not None and number > most:
            raise plan_error(path, row, "Params", f"{name} value {raw!r} must be {least}..{most}")
    return fields, extra, numbers


def _timm_name(raw: str) -> str | None:
    from raycolloc.job.workloads.compose import timm_model_names

    names = timm_model_names()
    for candidate in (raw, raw.lower(), raw.lower().replace("-", "_")):
        if candidate in names:
            return candidate
    key = _norm(raw)
    if key in _ALIASES:
        return _ALIASES[key]
    matches = [n for n in names if _norm(n) == key]
    return matches[0] if len(matches) == 1 else None


def _model(path: Path, row: Row, raw: str | None, known: Sequence[str]) -> str:
    """A preset's name (``tiny_cnn``), ``dlrm``, or a timm model name."""
    if raw is None:
        stem = _norm(PurePosixPath(row.f["File"]).stem)
        hints = {h for h in _HINTS if _norm(h) in stem}
        if len(hints) != 1:
            raise plan_error(
                path,
                row,
                "Params",
                f"no --model/--workload in Params and File {row.f['File']!r} does not "
                "name one model (--model takes any timm model)",
            )
        return hints.pop()
    if raw.lower().replace("-", "_") in known or raw.lower() == "dlrm":
        return raw.lower().replace("-", "_")
    name = _timm_name(raw)
    if name is None:
        from raycolloc.job.workloads.compose import closest_models

        near = closest_models(raw)
        raise plan_error(
            path,
            row,
            "Params",
            f"unknown model {raw!r} (--model takes any timm model)",
            near or ["see timm.list_models()"],
        )
    return name


def _file(ctx: RowContext, file: str) -> Path | None:
    """The row's File on this machine (relative to the plan, then to the working directory)."""
    for base in (ctx.plan_dir, Path.cwd()):
        candidate = (base / file).expanduser()
        if candidate.is_file():
            return candidate.resolve()
    return None


def _is_timm_train(file: Path) -> bool:
    """timm's own ``train.py`` (raycolloc trains its models itself), not a researcher's."""
    head = file.read_bytes()[: 1 << 16]
    return b"ImageNet Training Script" in head and (b"import timm" in head or b"from timm" in head)


def _script_job(path: Path, row: Row, file: Path, fields: dict[str, str], ctx: RowContext) -> WorkloadConfig:
    from raycolloc.job.data.detect import dataset_by_name

    try:
        command = ["python", row.f["File"], *shlex.split(row.f["Params"])]
    except ValueError as exc:
        raise plan_error(path, row, "Params", f"cannot split {row.f['Params']!r}: {exc}") from None
    data = fields.get("data")
    dataset = dataset_by_name(data) if data else None
    try:
        return WorkloadConfig(
            name="script",
            command=command,
            cwd=str(ctx.plan_dir if (ctx.plan_dir / row.f["File"]).is_file() else Path.cwd()),
            model=fields.get("model"),
            dataset=dataset,
            epoch_regex=ctx.epoch_regex,
        )
    except ConfigError as exc:
        raise plan_error(path, row, "File", str(exc)) from None


def parse_row(path: Path, row: Row, mode: str, ctx: RowContext) -> PlanJob:
    """The row as a job, every column checked.

    Raises:
        PlanError: naming the line, the row and the column.
    """
    _check_columns(path, row)
    status = _status(path, row)
    fields, extra, numbers = _fields(path, row)
    common: dict[str, Any] = {
        "run": row.f["Run"],
        "batch_size": numbers["batch"],
        "epochs": numbers["epochs"],
        "mig_profile": row.f["Collocation"].lower() if mode_of(mode).partitioned else None,
        "line": row.line,
        "extra": extra,
        "listeners": row.f["Listeners"],
        "file": row.f["File"],
        "status": status,
    }
    if (name := fields.get("workload")) is not None:
        if name not in ctx.known:
            raise plan_error(path, row, "Params", f"unknown workload {name!r}", ctx.known)
        return PlanJob(workload=name, **common)
    file = _file(ctx, row.f["File"])
    if file is not None and not _is_timm_train(file):
        return PlanJob(workload=_script_job(path, row, file, fields, ctx), kind="script", **common)
    model = _model(path, row, fields.get("model"), ctx.known)
    if model in ctx.known:
        return PlanJob(workload=model, **common)
    data = row_dataset(path, row, fields.get("data"), ctx, model)
    dataset = data.dataset
    shape: dict[str, Any] = data.shape  # only WorkloadConfig's int keys (_Data.shape), which mypy cannot see
    common.update(
        data_dir=data_path(ctx, fields["data"]) if fields.get("data") else None, note=data.note, by_name=data.by_name
    )
    if model == "dlrm":
        if dataset != "criteo":
            raise plan_error(path, row, "Params", f"model 'dlrm' trains on Criteo click logs, not {dataset}")
        if "dlrm_criteo" not in ctx.known:
            raise plan_error(
                path, row, "Params", "model 'dlrm' with dataset 'criteo' is not a known workload", ctx.known
            )
        return PlanJob(workload="dlrm_criteo", **common)
    if dataset not in DATASETS or DATASETS[dataset].family != "vision":
        raise plan_error(
            path,
            row,
            "Params",
            f"model {model!r} cannot train on {dataset!r}",
            [d for d, info in DATASETS.items() if info.family == "vision"],
        )
    preset = _preset_of(model, dataset) if not shape else None
    if preset is not None and preset in ctx.known:
        return PlanJob(workload=preset, **common)
    try:
        return PlanJob(workload=WorkloadConfig(name="timm", model=model, dataset=dataset, **shape), **common)
    except ConfigError as exc:
        raise plan_error(path, row, "Params", str(exc)) from None


def _preset_of(model: str, dataset: str) -> str | None:
    """The study's preset that is this model on this dataset (its name and config hash are kept)."""
    from raycolloc.job.workloads.registry import create_workload, list_workloads

    return next(
        (
            n
            for n in list_workloads()
            if (create_workload(n).model, create_workload(n).dataset) == (model, dataset)
            and create_workload(n).size != "tiny"
        ),
        None,
    )
