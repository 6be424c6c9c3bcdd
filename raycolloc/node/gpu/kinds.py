"""What each GPU backend allows (:class:`~raycolloc.devices.BackendTraits`), by its name.

The backend classes carry theirs (``NvmlBackend.traits``, ``SimBackend.traits``) and the steward
reports them; the driver looks them up here by ``cluster.backend`` before any steward answers
(starting a local Ray instance, warning of slow simulated training). Light: no NVML, no psutil.
"""

from __future__ import annotations

from raycolloc.devices import BackendTraits

__all__ = ["BACKEND_TRAITS", "NVML", "SIM", "backend_traits", "recorded_traits"]

# Host memory one job takes: its trainer actor (a Ray worker) and its training process with torch
# loaded. Real GPUs: the CUDA libraries and context's host side come on top of what the simulated
# GPUs measured; 3 GiB is an allowance, not a measurement (to be checked on a GPU node: ps -o rss of
# ray::Trainer and its training process). Real jobs each need cores of their own (trainer.num_cpus).
# A real GPU's MIG layout is the administrator's: raycolloc changes it only when told to.
NVML = BackendTraits(
    name="nvml",
    host_mib_per_job=3072.0,
    jobs_per_core=1,
    trains_on_cpu=False,
    declared_gpus=False,
    reconfigure_mig_default=False,
    simulated_admin=False,
    telemetry_prefix="",
    dcgm=True,
)
# Simulated GPUs: measured RSS of about 133 MiB (actor) + 520 MiB (training process, forked from the
# node's warm parent, with which it shares part of that) for tiny_cnn on the 2-core CI VM. They train
# tiny CPU models that time-share cores: a degree-7 cell (the study's largest) runs on a 2-core CI
# machine. Simulated GPUs belong to raycolloc: creating their MIG layout changes nobody's machine.
# Each simulated model and MIG-mode policy is a different set of GPUs, with its own steward.
SIM = BackendTraits(
    name="sim",
    host_mib_per_job=650.0,
    jobs_per_core=4,
    trains_on_cpu=True,
    declared_gpus=True,
    reconfigure_mig_default=True,
    simulated_admin=True,
    telemetry_prefix="sim-",
    dcgm=False,
    steward_keys=("gpu_model", "sim_mig_mode"),
    state_dir_key="sim_root",
)
BACKEND_TRAITS: dict[str, BackendTraits] = {t.name: t for t in (NVML, SIM)}


def backend_traits(name: str) -> BackendTraits:
    """The traits of the backend ``name`` (``cluster.backend``, resolved: ``nvml`` or ``sim``).

    Raises:
        KeyError: no backend of that name (``auto`` is resolved before anything asks).
    """
    try:
        return BACKEND_TRAITS[name]
    except KeyError:
        raise KeyError(f"no GPU backend {name!r}; known: {sorted(BACKEND_TRAITS)}") from None


def recorded_traits(name: object) -> BackendTraits:
    """The traits of the backend a results table names (its ``backend`` column); a real GPU's where
    the name is missing or unknown (results written before the column, or by a newer backend)."""
    return BACKEND_TRAITS.get(str(name), NVML)
