"""The ``workload/`` group and a mixed cell's jobs: what each job trains, as a composition.

A workload is a model, a dataset and training settings. ``workload.name`` is one of:

* a preset, a named composition of the study (``resnet26_cifar10``, ``dlrm_criteo``, ``tiny_cnn``...);
* ``timm``: any model of ``timm.list_models()`` on a dataset (``workload.model``, ``workload.dataset``);
* ``python``: the user's own function builds the job (``workload.entry=package.module:function``);
* ``script``: the user's unmodified training script is the job (``workload.command=[...]``).

Settings (``batch_size``, ``resolution``, ``num_classes``, ``dataset_size``, ``lr``) default to the
preset's or the dataset's. Each kind is a :class:`ConfigKind` that says which keys it takes, checks
them and names the job. Part of the config contract: validation here imports nothing beyond it; a
preset's name (the registry), a timm model's name (timm's registry, which imports torch) and then its
dataset are checked where the driver resolves the workload (:func:`raycolloc.job.workloads.resolve.resolve`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from raycolloc.config_checks import (
    AMP_MODES,
    COMPILE_MODES,
    MAX_EPOCHS,
    MAX_SAMPLES,
    ConfigError,
    check_choice,
    check_int,
    check_min,
    check_percentage,
    check_seconds,
)
from raycolloc.datasets import DATASETS

__all__ = [
    "KINDS",
    "SETTINGS",
    "ConfigKind",
    "MixJob",
    "PresetKind",
    "PythonKind",
    "ScriptKind",
    "TimmKind",
    "WorkloadConfig",
    "mix_job_hash_view",
    "workload_hash_view",
    "workload_label",
]

SETTINGS = ("batch_size", "resolution", "num_classes", "dataset_size", "lr")
# A learning rate past this diverges at the first step (NaN weights train as fast, and mean nothing).
MAX_LR = 1000.0
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.+-]+")


@dataclass
class WorkloadConfig:
    """``workload/``: the composition each job of a uniform cell trains (see the module docstring)."""

    name: str = "tiny_cnn"
    model: str | None = None
    dataset: str | None = None
    batch_size: int | None = None
    resolution: int | None = None
    num_classes: int | None = None
    dataset_size: int | None = None
    lr: float | None = None
    entry: str | None = None
    # ``Any`` (a dict once validated): Hydra refuses new keys inside a typed empty dict, so
    # ``workload.args={hidden: 64}`` could not be written on the command line.
    args: Any = None
    command: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: Any = None
    epoch_regex: str | None = None

    @property
    def kind(self) -> ConfigKind:
        """What kind of workload the name says: ``timm``, ``python``, ``script``, else a preset."""
        return _KINDS.get(self.name, _PRESET)

    def __post_init__(self) -> None:
        for key in ("args", "env"):
            value = {} if getattr(self, key) is None else getattr(self, key)
            if not isinstance(value, dict):
                raise ConfigError(f"workload.{key}={value!r} is not allowed; write a mapping: workload.{key}={{a: 1}}")
            setattr(self, key, dict(value))
        # Environment values are strings; a number written unquoted is meant as its text.
        self.env = {str(k): v if isinstance(v, str) else str(v) for k, v in self.env.items()}
        kind = self.kind
        for key in (f.name for f in dataclasses.fields(self)):
            if key == "name" or key in kind.settings or key in kind.keys:
                continue
            if getattr(self, key) not in (None, {}, []):
                raise ConfigError(
                    f"workload.{key} does not apply to workload={self.name}; it takes: "
                    f"{', '.join((*kind.settings, *kind.keys)) or 'nothing'}"
                )
        for key in ("batch_size", "dataset_size"):
            check_int(f"workload.{key}", getattr(self, key), 1, optional=True, maximum=MAX_SAMPLES)
        for key in ("resolution", "num_classes"):
            check_int(f"workload.{key}", getattr(self, key), 1, optional=True)
        check_min("workload.lr", self.lr, 0, optional=True, maximum=MAX_LR)
        kind.check(self)


def _label_part(text: str) -> str:
    return _LABEL_CHARS.sub("-", text).strip("-")


def _own_label(wc: WorkloadConfig) -> str | None:
    """A python or script job's ``model``/``dataset`` labels as its name, where given."""
    return _label_part("_".join(p for p in (wc.model, wc.dataset) if p)) if wc.model or wc.dataset else None


class ConfigKind:
    """One kind of ``workload`` config: the keys it takes, what it needs of them, its name in results.

    The base is a preset: its name is all it takes (besides the settings); the registry knows the
    name (checked where the driver resolves it).
    """

    keys: ClassVar[tuple[str, ...]] = ()  # beyond ``name`` and the settings
    settings: ClassVar[tuple[str, ...]] = SETTINGS
    # Runs as the user wrote it: raycolloc sets none of its settings (a plan row gives it none).
    as_written: ClassVar[bool] = False

    def check(self, wc: WorkloadConfig) -> None:
        """Raises :class:`ConfigError` where the config lacks what this kind needs."""

    def label(self, wc: WorkloadConfig) -> str:
        """The job's workload name in result tables, cell ids and reports."""
        return wc.name


class PresetKind(ConfigKind):
    """A preset of the registry (``resnet26_cifar10``, ``tiny_cnn``...)."""


class TimmKind(ConfigKind):
    """``workload=timm``: any timm model on a dataset of :data:`~raycolloc.datasets.DATASETS`."""

    keys = ("model", "dataset")

    def check(self, wc: WorkloadConfig) -> None:
        """A model is named (the name against timm's, then the dataset: where the driver resolves it,
        :func:`raycolloc.job.workloads.resolve.resolve`)."""
        if not wc.model:
            raise ConfigError(
                "workload=timm needs workload.model=NAME (any model of timm.list_models(), "
                "e.g. resnet50, convnext_atto, vit_tiny_patch16_224)"
            )

    def label(self, wc: WorkloadConfig) -> str:
        """``<model>_<dataset>``, with ``_<R>px`` where the resolution is not the dataset's."""
        info = DATASETS.get(str(wc.dataset))
        res = f"_{wc.resolution}px" if wc.resolution and (info is None or wc.resolution != info.resolution) else ""
        return _label_part(f"{wc.model}_{wc.dataset}{res}")


class PythonKind(ConfigKind):
    """``workload=python``: the user's function builds the job (``workload.entry=module:function``)."""

    keys = ("model", "dataset", "entry", "args")  # model/dataset: free labels in the result tables

    def check(self, wc: WorkloadConfig) -> None:
        if not wc.entry or not _ENTRY.match(wc.entry):
            raise ConfigError(
                f"workload.entry={wc.entry!r} is not allowed; workload=python needs "
                "workload.entry=package.module:function (see jobs/examples/)"
            )

    def label(self, wc: WorkloadConfig) -> str:
        """Its labels, else ``<module>.<function>``."""
        module, function = str(wc.entry).split(":")
        return _own_label(wc) or _label_part(f"{module.rsplit('.', 1)[-1]}.{function}")


class ScriptKind(ConfigKind):
    """``workload=script``: the user's unmodified script is the job; it trains as written."""

    keys = ("model", "dataset", "command", "cwd", "env", "epoch_regex")
    settings = ()  # raycolloc sets none of a script's settings
    as_written = True

    def check(self, wc: WorkloadConfig) -> None:
        if not wc.command or not all(isinstance(a, str) and a for a in wc.command):
            raise ConfigError(
                f"workload.command={wc.command!r} is not allowed; workload=script needs a "
                "non-empty list of words, e.g. 'workload.command=[python,train.py,--epochs,2]'"
            )
        if wc.epoch_regex is not None:
            try:
                re.compile(wc.epoch_regex)
            except re.error as exc:
                raise ConfigError(
                    f"workload.epoch_regex={wc.epoch_regex!r} is not a regular expression: {exc}"
                ) from None
        for key, value in wc.env.items():
            if isinstance(value, dict | list):
                raise ConfigError(f"workload.env.{key}={value!r} is not allowed; environment values are strings")

    def label(self, wc: WorkloadConfig) -> str:
        """Its labels, else ``script-<the script's name>``."""
        script = next((a for a in wc.command if a.endswith((".py", ".sh"))), wc.command[0] if wc.command else "script")
        return _own_label(wc) or "script-" + _label_part(script.rsplit("/", 1)[-1].rsplit(".", 1)[0])


_PRESET = PresetKind()
_KINDS: dict[str, ConfigKind] = {"timm": TimmKind(), "python": PythonKind(), "script": ScriptKind()}
KINDS = tuple(_KINDS)  # the names that are kinds, not presets (each has its conf/workload/<kind>.yaml)


def workload_label(wc: WorkloadConfig) -> str:
    """A job's workload name in result tables, cell ids and reports: its model and dataset.

    Presets keep their name; ``timm`` is ``<model>_<dataset>`` (with ``_<R>px`` where the
    resolution is not the dataset's); python and script jobs use their ``model``/``dataset`` labels
    when given, else the function's or the script's name.
    """
    return wc.kind.label(wc)


def workload_hash_view(wc: WorkloadConfig) -> dict[str, Any]:
    """The workload as the config hash sees it: unset keys are left out, so a preset hashes as
    ``{"name": ...}`` exactly as before workloads were compositions (resume keeps working)."""
    return {k: v for k, v in dataclasses.asdict(wc).items() if k == "name" or v not in (None, {}, [])}


@dataclass
class MixJob:
    """One job of a mixed cell (or of a radT plan cell); unset fields fall back to the top-level keys.

    ``workload`` is a preset name, or a composition (``{name: timm, model: ..., dataset: ...}``,
    ``{name: script, command: [...]}``); ``data_path`` is this job's dataset location with
    ``data.source=real`` (a plan row's ``--data``), else ``data.path``.
    """

    workload: Any = "tiny_cnn"
    batch_size: int | None = None
    epochs: int | None = None
    epoch_samples: int | None = None
    epoch_time_s: float | None = None
    mig_profile: str | None = None
    active_thread_percentage: int | None = None
    compile: str | None = None
    amp: str | None = None
    channels_last: bool | None = None
    data_path: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.workload, dict):
            known = {f.name for f in dataclasses.fields(WorkloadConfig)}
            if unknown := sorted(set(self.workload) - known):
                raise ConfigError(
                    f"unknown key mix.jobs[].workload.{unknown[0]}; a workload has: {', '.join(sorted(known))}"
                )
            self.workload = WorkloadConfig(**self.workload)
        elif not isinstance(self.workload, WorkloadConfig) and not isinstance(self.workload, str):
            # A preset's name is checked against the registry where the driver resolves it.
            raise ConfigError(
                f"mix.jobs[].workload={self.workload!r} is not allowed; give a preset's name or "
                "a composition ({name: timm, model: ..., dataset: ...})"
            )
        check_int("mix.jobs[].batch_size", self.batch_size, 1, optional=True, maximum=MAX_SAMPLES)
        check_int("mix.jobs[].epochs", self.epochs, 2, optional=True, maximum=MAX_EPOCHS)
        check_int("mix.jobs[].epoch_samples", self.epoch_samples, 1, optional=True, maximum=MAX_SAMPLES)
        check_seconds("mix.jobs[].epoch_time_s", self.epoch_time_s, 0.001, optional=True)
        check_percentage("mix.jobs[].active_thread_percentage", self.active_thread_percentage)
        if self.compile is not None:
            check_choice("mix.jobs[].compile", self.compile, COMPILE_MODES)
        if self.amp is not None:
            check_choice("mix.jobs[].amp", self.amp, AMP_MODES)

    @property
    def composition(self) -> WorkloadConfig:
        """The job's workload as a composition (a preset name becomes ``WorkloadConfig(name)``)."""
        return self.workload if isinstance(self.workload, WorkloadConfig) else WorkloadConfig(self.workload)


def mix_job_hash_view(job: MixJob) -> dict[str, Any]:
    """A mix job as the config hash sees it: a preset name stays a string, and ``data_path`` (added
    later) is left out while unset, so the study's mixes keep their hashes."""
    out = dataclasses.asdict(job)
    if isinstance(job.workload, WorkloadConfig):
        out["workload"] = workload_hash_view(job.workload)
    if job.data_path is None:
        out.pop("data_path")
    return out
