"""What a job of a mix trains, and the solo cell of each job of a mix (the serial baseline of the
study's Table 2): its config, and the Hydra overrides that compose it again."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raycolloc.config import Config, MigConfig, MixConfig, MixJob, TrainerConfig
from raycolloc.driver.hydra_errors import group_options
from raycolloc.driver.override_quoting import override_value
from raycolloc.workload_config import workload_hash_view

__all__ = ["JobSettings", "job_settings", "mix_solos", "solo_overrides"]


@dataclass(frozen=True)
class JobSettings:
    """What one job of a cell trains, the mix job's own value first, else the cell's top-level key
    (``batch_size``/``epoch_samples`` None: the workload's own default)."""

    batch_size: int | None
    epochs: int
    epoch_samples: int | None
    epoch_time_s: float | None
    trainer: TrainerConfig


def job_settings(cfg: Config, entry: MixJob | None) -> JobSettings:
    """The mix-job fallback rule, in one place: a mix job's unset field falls back to the top-level key
    (a uniform cell's job, ``entry`` None, takes the top-level keys); its compile/amp/channels_last
    override the trainer's. A mix's cell and the solo cells of its jobs both train by it."""

    def own(key: str) -> Any:
        return getattr(entry, key) if entry is not None else None

    changes = {k: own(k) for k in ("compile", "amp", "channels_last") if own(k) is not None}
    return JobSettings(
        batch_size=own("batch_size") or cfg.batch_size,
        epochs=own("epochs") or cfg.epochs,
        epoch_samples=own("epoch_samples") or cfg.epoch_samples,
        epoch_time_s=own("epoch_time_s") or cfg.epoch_time_s,
        trainer=dataclasses.replace(cfg.trainer, **changes),
    )


def mix_solos(cfg: Config) -> list[Config]:
    """The solo cell of each job of a mix: the job's workload alone on the GPU, same mode.

    Each solo trains what the job trains in the mix (batch size, epochs, epoch length, time budget,
    compile/amp/channels_last), so the mix's change against running its jobs one after the other is
    measured, not assumed. A solo composed this way hashes like the same cell written by hand
    (``workload=X degree=1 ...``), so one that ran before is reused. MPS limits, fault injection and the
    mix's MIG layout stay with the mix: a solo has the GPU to itself (MIG: the degree-1 layout). On a GPU
    the solo's measured epoch runs its floor (``min_epoch_s``) where the mix's jobs run none: a floorless
    solo would be a configuration of its own beside the user's solo of the same settings, and the gains
    would pool the two (review, 2026-12-05).
    """
    solos = []
    for entry in cfg.mix.jobs:
        own = job_settings(cfg, entry)
        solos.append(
            dataclasses.replace(
                cfg,
                workload=entry.composition,
                mix=MixConfig(),
                degree=1,
                mode=dataclasses.replace(cfg.mode, active_thread_percentage=None, pinned_mem_limit=None),
                mig=MigConfig(allow_reconfigure=cfg.mig.allow_reconfigure),
                trainer=dataclasses.replace(own.trainer, fault=None, fault_job=0),
                batch_size=own.batch_size,
                epochs=own.epochs,
                epoch_samples=own.epoch_samples,
                epoch_time_s=own.epoch_time_s,
                tags={**cfg.tags, "solo_of": cfg.mix.name or "custom"},
            )
        )
    return solos


# What a solo cell sets itself (mix_solos): a mix's own overrides of these keys (or below them) do not apply.
_SOLO_KEYS = (
    "mix",
    "workload",
    "degree",
    "batch_size",
    "epochs",
    "epoch_samples",
    "epoch_time_s",
    "repeat",
    "mode.active_thread_percentage",
    "mode.pinned_mem_limit",
    "mig.layout",
    "trainer.fault",
    "trainer.fault_job",
    "trainer.compile",
    "trainer.amp",
    "trainer.channels_last",
    "tags.solo_of",
)


def solo_overrides(mix_overrides: Sequence[str], solo: Config) -> list[str]:
    """Overrides that compose ``solo`` (one of :func:`mix_solos`) again: its mix's, less the keys the solo
    sets itself, then the solo's own values of those keys (its workload as ``workload=<preset>`` and the
    composition's keys)."""

    def key(override: str) -> str:
        return override.lstrip("~+").split("=", 1)[0].strip()

    kept = [o for o in mix_overrides if not any(key(o) == k or key(o).startswith(f"{k}.") for k in _SOLO_KEYS)]
    view = workload_hash_view(solo.workload)
    name = view.pop("name")
    preset = f"workload={name}" if name in group_options("workload") else f"workload.name={override_value(name)}"
    own = ["mix=none", preset, *(f"workload.{k}={override_value(v)}" for k, v in view.items()), f"degree={solo.degree}"]
    own += [
        f"{k}={override_value(getattr(solo, k))}" for k in ("batch_size", "epochs", "epoch_samples", "epoch_time_s")
    ]
    own += [f"mode.{k}=null" for k in ("active_thread_percentage", "pinned_mem_limit")]
    own += [f"mig.layout={override_value(solo.mig.layout)}"]
    own += [
        f"trainer.{k}={override_value(getattr(solo.trainer, k))}"
        for k in ("fault", "fault_job", "compile", "amp", "channels_last")
    ]
    return [*kept, *own, f"++tags.solo_of={override_value(solo.tags['solo_of'])}"]
