"""Read a radT experiment-plan CSV into collocation cells.

A radT plan has the columns
``Experiment,Workload,Status,Run,Devices,Collocation,File,Listeners,Params``.
Rows sharing (Experiment, Workload) form a group that starts together; within a
group, rows with the same ``Devices`` value share that GPU and form one cell.
"""

from __future__ import annotations

import csv
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["KNOWN_WORKLOADS", "PlanCell", "PlanError", "PlanGroup", "PlanJob", "groups_to_run", "read_plan"]

KNOWN_WORKLOADS: tuple[str, ...] = (
    "resnet26_cifar10", "resnet50_imagenet64", "efficientnetv2s_imagenet64", "resnet152_imagenet",
    "cait_xxs24_imagenet", "dlrm_criteo", "tiny_cnn", "tiny_dlrm",
)

COLUMNS = ("Experiment", "Workload", "Status", "Run", "Devices", "Collocation", "File", "Listeners", "Params")
MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")
_STATUS = {"": "run", "PENDING": "run", "QUEUED": "run", "FINISHED": "finished", "FAILED": "failed"}
_NAIVE = ("-", "", "nan")  # radT itself writes "nan" back for an empty Collocation
# Accepted spellings -> canonical model / dataset (matched after _norm).
_MODELS = {
    "resnet26": "resnet26", "resnet50": "resnet50", "resnet152": "resnet152",
    "efficientnet_v2_s": "efficientnetv2s", "efficientnetv2_s": "efficientnetv2s",
    "efficientnetv2s": "efficientnetv2s", "cait_xxs24": "cait_xxs24",
    "cait_xxs24_224": "cait_xxs24", "dlrm": "dlrm",
}
_DATASETS = {
    "cifar10": "cifar10", "cifar-10-batches-py": "cifar10", "imagenet64": "imagenet64",
    "imagenet": "imagenet", "criteo": "criteo", "criteo_kaggle": "criteo", "kaggle": "criteo",
}
_MODEL_KEYS = {"model", "arch", "a"}
_BATCH_KEYS = {"batch_size", "b", "mini_batch_size"}
_EPOCH_KEYS = {"epochs", "nepochs"}
_DATA_KEYS = {"data", "data_dir", "dataset", "data_set", "data_path", "raw_data_file", "processed_data_file"}
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _norm(text: str) -> str:
    return re.sub(r"[-_.\s]", "", text.lower())


_MODEL_LOOKUP = {_norm(k): v for k, v in _MODELS.items()}
_DATASET_LOOKUP = {_norm(k): v for k, v in _DATASETS.items()}


class PlanError(ValueError):
    """A plan CSV that cannot be turned into runnable cells."""


@dataclass(frozen=True)
class PlanJob:
    """One training job (one CSV row) mapped onto a raycolloc workload."""

    workload: str
    run: str
    batch_size: int | None
    epochs: int | None
    mig_profile: str | None
    line: int
    extra: dict[str, str] = field(default_factory=dict)
    listeners: str = ""
    file: str = ""
    status: str = "run"


@dataclass(frozen=True)
class PlanCell:
    """Jobs of one group that share one ``Devices`` value (one GPU)."""

    experiment: str
    workload_group: str
    devices: str
    mode: str  # "naive" | "mps" | "mig"
    jobs: tuple[PlanJob, ...]

    def to_overrides(self) -> list[str]:
        """Hydra command-line overrides describing this cell."""
        keys = ("workload", "batch_size", "epochs", "mig_profile")
        jobs = ",".join("{" + ",".join(f"{k}:{_hydra_value(getattr(j, k))}" for k in keys) + "}" for j in self.jobs)
        return [f"mode={self.mode}", f"+cell.jobs=[{jobs}]"]


@dataclass(frozen=True)
class PlanGroup:
    """Cells that start together: one (Experiment, Workload) pair."""

    experiment: str
    workload: str
    status: str  # "run" | "finished" | "failed"
    cells: tuple[PlanCell, ...]


def _hydra_value(value: object) -> str:
    """Render a primitive for Hydra's override grammar, quoting when not plain."""
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in ("null", "true", "false", "nan", "inf"):
        return text
    # Hydra: inside quotes, escape the quote and any backslashes preceding a quote or the end.
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
    return f"'{text}'"


@dataclass
class _Row:
    line: int
    f: dict[str, str]

    def where(self, path: Path) -> str:
        f = self.f
        return f"{path}:{self.line}: Experiment {f['Experiment']!r} Workload {f['Workload']!r} Run {f['Run']!r}"


def _error(path: Path, row: _Row, what: str, allowed: Sequence[str] = ()) -> PlanError:
    msg = f"{row.where(path)}: {what}"
    return PlanError(msg + (f"; allowed: {', '.join(allowed)}" if allowed else ""))


_KV = re.compile(r"^[A-Za-z_][\w.-]*=")  # a "key=value" token is never a flag's value


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.match(r"^-\d*\.?\d", token)


def _parse_params(text: str) -> list[tuple[str, str]]:
    """Split ``--k v``, ``--k=v`` and ``k=v`` (also ``a=1,b=2``) into pairs."""
    tokens, pairs, i = shlex.split(text), [], 0
    while i < len(tokens):
        tok = tokens[i]
        if _is_flag(tok):
            key = tok.lstrip("-")
            if "=" in key:
                pairs.append(tuple(key.split("=", 1)))
            elif i + 1 < len(tokens) and not _is_flag(tokens[i + 1]) and not _KV.match(tokens[i + 1]):
                pairs.append((key, tokens[i + 1]))
                i += 1
            else:
                pairs.append((key, "true"))
        elif "=" in tok:
            parts = tok.split(",")
            chunks = parts if all("=" in p for p in parts) else [tok]  # radT's own "a=1,b=2"
            pairs.extend(tuple(c.split("=", 1)) for c in chunks)
        else:
            pairs.append(("_positional", tok))
        i += 1
    return pairs


def _dataset_of(value: str) -> str | None:
    for part in reversed(PurePosixPath(value.rstrip("/")).parts):  # final name first
        if (found := _DATASET_LOOKUP.get(_norm(part))) is not None:
            return found
    return None


def _job(path: Path, row: _Row, mode: str, known: Sequence[str]) -> PlanJob:
    f, fields, extra = row.f, {}, {}
    try:
        pairs = _parse_params(f["Params"])
    except ValueError as exc:
        raise _error(path, row, f"cannot split Params {f['Params']!r}: {exc}") from None
    for key, value in pairs:
        k = key.lower().replace("-", "_")
        group = next((g for g, ks in (("model", _MODEL_KEYS), ("batch", _BATCH_KEYS), ("epochs", _EPOCH_KEYS),
                                      ("data", _DATA_KEYS), ("workload", {"workload"})) if k in ks), None)
        if group:
            fields[group] = value
        elif k == "_positional" and "data" not in fields and "/" in value:
            fields["data"] = value  # e.g. the PyTorch ImageNet example's positional DIR
        else:
            extra[key] = f"{extra[key]} {value}" if key in extra else value
    numbers: dict[str, int | None] = {}
    for name in ("batch", "epochs"):
        raw = fields.get(name)
        try:
            numbers[name] = None if raw is None else int(raw)
        except ValueError:
            raise _error(path, row, f"{name} value {raw!r} is not an integer") from None
    workload = _workload(path, row, fields, known)
    return PlanJob(workload, f["Run"], numbers["batch"], numbers["epochs"],
                   f["Collocation"].lower() if mode == "mig" else None, row.line, extra,
                   f["Listeners"], f["File"], _status(path, row))


def _workload(path: Path, row: _Row, fields: dict[str, str], known: Sequence[str]) -> str:
    if (name := fields.get("workload")) is not None:
        if name not in known:
            raise _error(path, row, f"unknown workload {name!r}", known)
        return name
    raw = fields.get("model")
    if raw is not None and raw.lower().replace("-", "_") in known:
        return raw.lower().replace("-", "_")
    models = sorted(_MODELS)
    if raw is not None:
        if (model := _MODEL_LOOKUP.get(_norm(raw))) is None:
            raise _error(path, row, f"unknown model {raw!r}", models)
    else:
        stem = _norm(PurePosixPath(row.f["File"]).stem)
        hints = {v for k, v in _MODEL_LOOKUP.items() if k in stem}
        if len(hints) != 1:
            raise _error(path, row, f"no --model/--workload in Params and File {row.f['File']!r} "
                         "does not name one model", models)
        model = hints.pop()
    data = fields.get("data")
    if data is None:
        raise _error(path, row, f"model {model!r} needs a dataset (--data DIR)", sorted(_DATASETS))
    if (dataset := _dataset_of(data)) is None:
        raise _error(path, row, f"unknown dataset {PurePosixPath(data.rstrip('/')).name!r} "
                     f"(from {data!r})", sorted(_DATASETS))
    if (name := f"{model}_{dataset}") not in known:
        raise _error(path, row, f"model {model!r} with dataset {dataset!r} is not a known workload", known)
    return name


def _status(path: Path, row: _Row) -> str:
    word = row.f["Status"].split()[0].upper() if row.f["Status"].strip() else ""
    if word not in _STATUS:  # radT writes back e.g. "FINISHED run-name (0_A)": first word counts
        raise _error(path, row, f"unknown Status {row.f['Status']!r}", [s or "(empty)" for s in _STATUS])
    return _STATUS[word]


def _mode(path: Path, row: _Row) -> str:
    colloc = row.f["Collocation"]
    if colloc.lower() in _NAIVE:
        return "naive"
    if colloc.lower() == "mps":
        return "mps"
    if MIG_PROFILE.match(colloc.lower()):
        return "mig"
    raise _error(path, row, f"unknown Collocation {colloc!r}", ["-", "(empty)", "MPS", MIG_PROFILE.pattern])


def _rows(path: Path) -> list[_Row]:
    header: list[str] | None = None
    rows: list[_Row] = []
    for lineno, text in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        try:
            cells = [c.strip() for c in next(csv.reader([text], skipinitialspace=True, strict=True))]
        except csv.Error as exc:
            raise PlanError(f"{path}:{lineno}: malformed CSV line: {exc}") from None
        if header is None:
            if missing := [c for c in COLUMNS if c.lower() not in (h.lower() for h in cells)]:
                raise PlanError(f"{path}:{lineno}: header lacks column(s) {', '.join(missing)}; "
                                f"expected: {','.join(COLUMNS)}")
            header = cells
            continue
        if len(cells) != len(header):
            raise PlanError(f"{path}:{lineno}: {len(cells)} fields, header has {len(header)} "
                            "(quote Params that contain commas)")
        by_lower = {h.lower(): v for h, v in zip(header, cells)}
        rows.append(_Row(lineno, {c: by_lower[c.lower()] for c in COLUMNS}))
    if header is None:
        raise PlanError(f"{path}: no header line; expected: {','.join(COLUMNS)}")
    return rows


def read_plan(path: str | Path, known_workloads: Sequence[str] = KNOWN_WORKLOADS) -> list[PlanGroup]:
    """Parse a radT plan CSV into groups of cells, in file order."""
    path = Path(path)
    grouped: dict[tuple[str, str], dict[str, list[_Row]]] = {}
    for row in _rows(path):
        key = (row.f["Experiment"], row.f["Workload"])
        grouped.setdefault(key, {}).setdefault(row.f["Devices"], []).append(row)
    groups = []
    for (experiment, workload), by_device in grouped.items():
        cells = []
        for devices, rows in by_device.items():
            modes = [_mode(path, r) for r in rows]
            if len(set(modes)) > 1:
                rows_text = "; ".join(f"line {r.line} Run {r.f['Run']!r}: {r.f['Collocation'] or '(empty)'} -> {m}"
                                      for r, m in zip(rows, modes))
                raise PlanError(f"{path}: Experiment {experiment!r} Workload {workload!r} Devices {devices!r} "
                                f"mixes collocation modes ({rows_text}); one cell needs one of naive, mps, mig")
            jobs = tuple(_job(path, r, modes[0], known_workloads) for r in rows)
            cells.append(PlanCell(experiment, workload, devices, modes[0], jobs))
        states = [j.status for c in cells for j in c.jobs]
        status = ("finished" if all(s == "finished" for s in states)
                  else "failed" if "failed" in states else "run")
        groups.append(PlanGroup(experiment, workload, status, tuple(cells)))
    return groups


def groups_to_run(groups: Sequence[PlanGroup], rerun: bool = False) -> list[PlanGroup]:
    """Groups still to run: never all-FINISHED ones; FAILED ones only with ``rerun``."""
    return [g for g in groups if g.status == "run" or (g.status == "failed" and rerun)]
