"""The ``workload/`` group and a mixed cell's jobs: what each job trains, as a composition.

A workload is a model, a dataset and training settings. ``workload.name`` is one of:

* a preset, a named composition of the study (``resnet26_cifar10``, ``dlrm_criteo``, ``tiny_cnn``...);
* ``timm``: any model of ``timm.list_models()`` on a dataset (``workload.model``, ``workload.dataset``);
* ``python``: the user's own function builds the job (``workload.entry=package.module:function``);
* ``script``: the user's unmodified training script is the job (``workload.command=[...]``).

Settings (``batch_size``, ``resolution``, ``num_classes``, ``dataset_size``, ``lr``) default to the
preset's or the dataset's. Validation here is cheap except for ``timm``, whose model name is checked
against timm's registry (which imports torch, in the driver only).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from raycolloc.config_checks import ConfigError, check_choice, check_int, check_min
from raycolloc.job.workloads.registry import list_workloads

__all__ = ["KINDS", "SETTINGS", "MixJob", "WorkloadConfig", "mix_job_hash_view", "workload_hash_view",
           "workload_label"]

KINDS = ("timm", "python", "script")
SETTINGS = ("batch_size", "resolution", "num_classes", "dataset_size", "lr")
# Which keys (beyond name and the settings) each kind takes; model/dataset name a python or
# script job in the result tables (they are free labels there, nothing is built from them).
_KEYS = {"preset": (), "timm": ("model", "dataset"), "python": ("model", "dataset", "entry", "args"),
         "script": ("model", "dataset", "command", "cwd", "env", "epoch_regex")}
_SCRIPT_SETTINGS = ()  # a script trains as written: raycolloc sets none of its settings
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
    def kind(self) -> str:
        """``preset``, ``timm``, ``python`` or ``script``."""
        return self.name if self.name in KINDS else "preset"

    def __post_init__(self) -> None:
        for key in ("args", "env"):
            value = {} if getattr(self, key) is None else getattr(self, key)
            if not isinstance(value, dict):
                raise ConfigError(f"workload.{key}={value!r} is not allowed; write a mapping: workload.{key}={{a: 1}}")
            setattr(self, key, dict(value))
        # Environment values are strings; a number written unquoted is meant as its text.
        self.env = {str(k): v if isinstance(v, str) else str(v) for k, v in self.env.items()}
        presets = list_workloads()
        check_choice("workload", self.name, (*presets, *KINDS))
        kind = self.kind
        settings = _SCRIPT_SETTINGS if kind == "script" else SETTINGS
        for key in (f.name for f in dataclasses.fields(self)):
            if key == "name" or key in settings or key in _KEYS[kind]:
                continue
            if getattr(self, key) not in (None, {}, []):
                raise ConfigError(f"workload.{key} does not apply to workload={self.name}; it takes: "
                                  f"{', '.join((*settings, *_KEYS[kind])) or 'nothing'}")
        for key in ("batch_size", "resolution", "num_classes", "dataset_size"):
            check_int(f"workload.{key}", getattr(self, key), 1, optional=True)
        check_min("workload.lr", self.lr, 0, optional=True)
        if kind == "timm":
            self._check_timm()
        elif kind == "python":
            if not self.entry or not _ENTRY.match(self.entry):
                raise ConfigError(f"workload.entry={self.entry!r} is not allowed; workload=python needs "
                                  "workload.entry=package.module:function (see jobs/examples/)")
        elif kind == "script":
            self._check_script()

    def _check_timm(self) -> None:
        from raycolloc.job.workloads.compose import (
            UnknownModel,
            check_composition,
            check_model,
        )

        if not self.model:
            raise ConfigError("workload=timm needs workload.model=NAME (any model of timm.list_models(), "
                              "e.g. resnet50, convnext_atto, vit_tiny_patch16_224)")
        try:
            check_model(self.model)
        except UnknownModel as exc:
            raise ConfigError(f"workload.model={self.model!r}: {exc}") from None
        if not self.dataset:
            from raycolloc.job.workloads.datasets import DATASETS

            raise ConfigError(f"workload=timm needs workload.dataset; choose one of: {', '.join(DATASETS)}")
        try:
            check_composition(self.dataset, self.resolution, self.num_classes, self.dataset_size)
        except ValueError as exc:
            raise ConfigError(f"workload.dataset={self.dataset!r}: {exc}") from None

    def _check_script(self) -> None:
        if not self.command or not all(isinstance(a, str) and a for a in self.command):
            raise ConfigError(f"workload.command={self.command!r} is not allowed; workload=script needs a "
                              "non-empty list of words, e.g. 'workload.command=[python,train.py,--epochs,2]'")
        if self.epoch_regex is not None:
            try:
                re.compile(self.epoch_regex)
            except re.error as exc:
                raise ConfigError(f"workload.epoch_regex={self.epoch_regex!r} is not a regular expression: "
                                  f"{exc}") from None
        for key, value in self.env.items():
            if isinstance(value, dict | list):
                raise ConfigError(f"workload.env.{key}={value!r} is not allowed; environment values are strings")


def _label_part(text: str) -> str:
    return _LABEL_CHARS.sub("-", text).strip("-")


def workload_label(wc: WorkloadConfig) -> str:
    """A job's workload name in result tables, cell ids and reports: its model and dataset.

    Presets keep their name; ``timm`` is ``<model>_<dataset>`` (with ``_<R>px`` where the
    resolution is not the dataset's); python and script jobs use their ``model``/``dataset`` labels
    when given, else the function's or the script's name.
    """
    if wc.kind == "preset":
        return wc.name
    if wc.kind == "timm":
        from raycolloc.job.workloads.datasets import DATASETS

        info = DATASETS.get(str(wc.dataset))
        res = f"_{wc.resolution}px" if wc.resolution and (info is None or wc.resolution != info.resolution) else ""
        return _label_part(f"{wc.model}_{wc.dataset}{res}")
    if wc.model or wc.dataset:
        return _label_part("_".join(p for p in (wc.model, wc.dataset) if p))
    if wc.kind == "python":
        module, function = str(wc.entry).split(":")
        return _label_part(f"{module.rsplit('.', 1)[-1]}.{function}")
    script = next((a for a in wc.command if a.endswith((".py", ".sh"))), wc.command[0] if wc.command else "script")
    return "script-" + _label_part(script.rsplit("/", 1)[-1].rsplit(".", 1)[0])


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
        from raycolloc.config import AMP_MODES, COMPILE_MODES

        if isinstance(self.workload, dict):
            known = {f.name for f in dataclasses.fields(WorkloadConfig)}
            if unknown := sorted(set(self.workload) - known):
                raise ConfigError(f"unknown key mix.jobs[].workload.{unknown[0]}; a workload has: "
                                  f"{', '.join(sorted(known))}")
            self.workload = WorkloadConfig(**self.workload)
        elif not isinstance(self.workload, WorkloadConfig):
            check_choice("mix.jobs[].workload", self.workload, tuple(list_workloads()))
        check_int("mix.jobs[].batch_size", self.batch_size, 1, optional=True)
        check_int("mix.jobs[].epochs", self.epochs, 2, optional=True)
        check_int("mix.jobs[].epoch_samples", self.epoch_samples, 1, optional=True)
        check_min("mix.jobs[].epoch_time_s", self.epoch_time_s, 0.001, optional=True)
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
