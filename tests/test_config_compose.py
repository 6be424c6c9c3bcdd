"""raycolloc.config_compose against Hydra's own compose: the same config, key order and flags, and the
same errors, for every kind of override a command is given."""

from __future__ import annotations

import time

import pytest
from omegaconf import OmegaConf

import raycolloc.config_compose as config_compose
from raycolloc import conf_dir
from raycolloc.config_compose import _BASES, compose_config

GOOD = [
    [],
    ["degree=3"],
    ["workload=tiny_cnn", "cluster=local", "degree=2", "epoch_samples=64", "out_dir=/tmp/x"],
    ["degree=2", "workload=tiny_cnn", "mode=mps", "mode.active_thread_percentage=50"],
    ["cluster=local", "workload=timm", "workload.model=resnet18", "workload.dataset=cifar10", "batch_size=null"],
    ["cluster=local", "mix=tiny_mixed", "mode=mps", "mix.jobs.0.compile=default", "trainer.fault=oom"],
    ["cluster=local", "cluster.num_gpus=4", "cluster.gpu_model=H200", "queue.sim_speed=10", "queue.policy=carma"],
    ["workload=python", "workload.entry=tests.sleepy_workload:build", "workload.args={meet_dir:'/tmp/m',meet:4}"],
    ["out_dir='/tmp/a b;c'", "seed=7", "epoch_time_s=0.5", "repeats=auto", "measure.budget=0.5"],
    ["+dry_run=true", "degree=2"],  # an addition: Hydra composes it whole
    ["++seed=3", "degree=1"],  # a forced addition: Hydra composes it whole
    ["hydra.job.name=x", "degree=1"],  # a hydra key: Hydra composes it whole
    ["mode.name=naive", "mode={name:mps}"],  # a dict on a group key is a value, applied in order
    ["workload.name=a", "workload={name:b}"],
]

BAD = [
    ["degree=two"],
    ["no_such_key=1"],
    ["workload=tiny_cnn", "workload.no_such=1"],
    ["workload=nope"],
    ["degree=1,2"],  # a sweep in a plain compose
    ["degree=["],  # Hydra's parser refuses it
    ["cluster.num_gpus=abc", "cluster=local"],
    ["mode=mps", "mode.pipe_root=[1,2]"],
    ["degree=two", "workload={no_such:1}"],  # Hydra names the first bad value in order
]


def _hydra(overrides: list[str]):  # noqa: ANN202 - a DictConfig
    from hydra import compose, initialize_config_dir

    from raycolloc.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@pytest.mark.parametrize("overrides", GOOD, ids=[" ".join(o) or "none" for o in GOOD])
def test_the_config_is_hydras_in_content_order_and_flags(overrides: list[str]) -> None:
    for _ in range(2):  # the second call is served from the group list's composition
        ours, theirs = compose_config(overrides), _hydra(overrides)
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs)
        assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(theirs)
        assert OmegaConf.get_type(ours) is OmegaConf.get_type(theirs)
        assert OmegaConf.get_type(ours.cluster) is OmegaConf.get_type(theirs.cluster)


@pytest.mark.parametrize("overrides", BAD, ids=[" ".join(o) for o in BAD])
def test_a_bad_override_raises_as_hydra_raises_it(overrides: list[str]) -> None:
    with pytest.raises(Exception) as theirs:
        _hydra(overrides)
    for _ in range(2):
        with pytest.raises(type(theirs.value)) as ours:
            compose_config(overrides)
        assert str(ours.value) == str(theirs.value)
        assert str(ours.value.__cause__) == str(theirs.value.__cause__)


def test_a_copy_changed_by_its_caller_leaves_the_next_one_as_composed() -> None:
    first = compose_config(["workload=tiny_cnn", "degree=2"])
    first.degree = 5
    first.workload.name = "changed"
    again = compose_config(["workload=tiny_cnn", "degree=3"])
    assert again.degree == 3 and again.workload.name == "tiny_cnn"
    assert ("workload=tiny_cnn",) in _BASES  # one Hydra composition for both


def test_hydra_composes_once_per_group_list_and_each_copy_resolves_now_and_the_environment_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []
    real = config_compose._hydra_compose
    monkeypatch.setattr(config_compose, "_hydra_compose", lambda o: calls.append(o) or real(o))
    _BASES.clear()
    for degree in (1, 2, 3):
        assert compose_config(["workload=tiny_cnn", "cluster=local", f"degree={degree}"]).degree == degree
    assert calls == [["workload=tiny_cnn", "cluster=local"]]
    # ${now:} is each call's own time, not the first composition's.
    stamps = []
    for _ in range(2):
        stamps.append(compose_config(["out_dir=/tmp/r/${now:%H-%M-%S-%f}"]).out_dir)
        time.sleep(0.01)
    assert stamps[0] != stamps[1]
    # A group chosen through the environment is chosen again by Hydra every time.
    choice = "workload=${oc.env:RAYCOLLOC_TEST_WL,tiny_cnn}"
    monkeypatch.setenv("RAYCOLLOC_TEST_WL", "tiny_cnn")
    assert compose_config([choice]).workload.name == _hydra([choice]).workload.name == "tiny_cnn"
    monkeypatch.setenv("RAYCOLLOC_TEST_WL", "tiny_dlrm")
    assert compose_config([choice]).workload.name == _hydra([choice]).workload.name == "tiny_dlrm"
