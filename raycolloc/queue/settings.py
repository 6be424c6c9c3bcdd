"""The queue's settings: the real ``conf/`` tree composed with the command line's overrides.

``queue.*`` (the ``queue/`` group), ``cluster=...`` (its GPU model and count), ``out_dir`` and ``seed``
are the keys a queue reads; every group is validated as a sweep's would be, so a typo or a bad value
exits 2 before anything is queued. With ``queue.truth=corpus`` the corpus is read here, and its GPU
model must be the cluster's (``cluster.gpu_model``).

The GPU model: a simulated replay's is ``cluster.gpu_model`` (it declares the GPUs it simulates); a
``queue.runner=ray`` run's is the one the cluster's GPUs report here (NVML's name, or the simulated
backend's), so that a trace, a claim and a table name the GPU the jobs ran on. Where the catalogue has
no table for that GPU, or the GPUs are not seen from here (``cluster.address``), ``cluster.gpu_model``
stands in and ``QueueSettings.gpu_note`` says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raycolloc.advise.model import Gpu
from raycolloc.config import Config, ConfigError, load_config
from raycolloc.node.mig.placement import gpu_model_of
from raycolloc.node.mig.profiles import UnknownGpuModel
from raycolloc.queue.catalog import sim_gpu
from raycolloc.queue.corpus import corpus_dir, load_corpus

__all__ = ["QueueSettings", "cluster_gpu", "compose_settings", "model_name"]


@dataclass(frozen=True)
class QueueSettings:
    """What a queue command runs with: the whole validated config, the simulated cluster's shape, and
    the command line's overrides (a measured profile's cell is composed from them as the advisor's is)."""

    config: Config
    nodes: int
    gpus_per_node: int
    gpu: Gpu
    words: tuple[str, ...] = ()
    gpu_note: str = ""  # how the GPU model was found where it is not the cluster's own (a stand-in)

    @property
    def out_dir(self) -> Path:
        return Path(self.config.out_dir)

    @property
    def gpu_label(self) -> str:
        """The GPU model for messages: its name, and the stand-in it is where it is one."""
        return f"{self.gpu.name} ({self.gpu_note})" if self.gpu_note else self.gpu.name


def compose_settings(words: Sequence[str]) -> QueueSettings:
    """Compose ``conf/config.yaml`` with ``words`` (Hydra overrides) and validate it.

    Raises:
        ConfigError: an override Hydra cannot compose, a bad value (named), an unknown GPU model.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from raycolloc.config_compose import compose_config

    try:
        composed = compose_config(words)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        lines = str(exc).splitlines()
        options = [x.strip() for x in lines[1:] if x.startswith("\t") and not x.strip().startswith("base_")]
        allowed = f"; allowed: {', '.join(options)}" if options else ""
        raise ConfigError(f"{' '.join(words)}: {lines[0]}{allowed}") from None
    config = load_config(composed)
    if config.queue.profiles is None:  # resolved once, so a database claims what ran, however it was spelled
        resolved = "measured" if config.queue.runner == "ray" else "catalog"
        config = dataclasses.replace(config, queue=dataclasses.replace(config.queue, profiles=resolved))
    queue, cluster = config.queue, config.cluster
    try:
        gpu = sim_gpu(cluster.gpu_model)
    except UnknownGpuModel as exc:
        raise ConfigError(f"cluster.gpu_model={cluster.gpu_model!r}: {exc}") from None
    note = ""
    if queue.runner == "ray":
        gpu, note = cluster_gpu(config, gpu)
    if queue.truth == "corpus":
        corpus = load_corpus(corpus_dir(queue))
        if corpus.gpu_model != gpu.name:
            raise ConfigError(
                f"cluster.gpu_model={cluster.gpu_model!r} is not allowed with queue.truth=corpus: the corpus "
                f"{corpus.path} was measured on {corpus.gpu_model}; give cluster.gpu_model={corpus.gpu_model}"
            )
    return QueueSettings(
        config=config,
        nodes=queue.sim_nodes or 1,
        gpus_per_node=queue.sim_gpus_per_node or cluster.num_gpus,
        gpu=gpu,
        words=tuple(words),
        gpu_note=note,
    )


def cluster_gpu(config: Config, stand_in: Gpu) -> tuple[Gpu, str]:
    """The GPU a ``queue.runner=ray`` run's jobs run on, as the cluster reports it here, and a note
    where ``stand_in`` (``cluster.gpu_model``'s) is used instead: the GPUs are not seen from this
    machine, or the catalogue has no table for the one reported (its name is kept, its memory and
    rates are the stand-in's)."""
    from raycolloc.driver.cell_specs import resolve_backend
    from raycolloc.node.gpu.names import local_gpu_names

    config = resolve_backend(config)
    names = [] if config.cluster.address else local_gpu_names(config.cluster)
    if not names:
        where = f"cluster.address={config.cluster.address}" if config.cluster.address else "no GPU on this machine"
        return stand_in, f"the cluster's GPUs are not seen from here ({where}): cluster.gpu_model stands in"
    reported = names[0]
    others = sorted(set(names) - {reported})
    mixed = f"; GPU 0's of {', '.join([reported, *others])}" if others else ""
    try:
        return sim_gpu(reported), mixed.lstrip("; ")
    except UnknownGpuModel:
        note = f"no catalogue entry for {reported}: {stand_in.name}'s (cluster.gpu_model) stands in{mixed}"
        return dataclasses.replace(stand_in, name=reported), note


def model_name(reported: str) -> str:
    """The catalogue's name of a GPU as NVML or the simulated backend reports it (``NVIDIA H200``:
    ``H200-141GB``); the reported name where the catalogue has no table for it."""
    try:
        return gpu_model_of(reported).name
    except UnknownGpuModel:
        return reported
