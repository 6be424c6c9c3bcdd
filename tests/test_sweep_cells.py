"""What a sweep runs beyond the user's cells: repeats (interleaved, each its own result) and the
solo cells of every mix (Table 2's serial baseline); the config hash that makes them distinct; the
cell directories named by label. Composes the real conf/ tree; no Ray."""

from __future__ import annotations

import dataclasses

import pytest

from raycolloc.config import ConfigError, config_hash, load_config, measured_floor
from raycolloc.driver.cell_specs import cell_dir_names, mix_solos, sweep_cells, validate_cell

from .conftest import compose, load


def test_config_hash_is_unchanged_by_the_new_keys_at_their_defaults() -> None:
    # The hash main computed for this config before repeat/repeats/epoch_time_s existed (resume keeps
    # finding results written before them).
    cfg = load_config(compose(["cluster=local", "workload=tiny_cnn", "degree=2"]))
    assert config_hash(cfg) == "af72a7cc298fb7ff"
    mixed = load_config(compose(["cluster=local", "mix=tiny_mixed", "mode=mps"]))
    assert config_hash(mixed) == "0c63ead64484eaf6"
    assert config_hash(dataclasses.replace(cfg, repeats=5)) == config_hash(cfg)  # how many: not what is measured
    assert config_hash(dataclasses.replace(cfg, repeat=1)) != config_hash(cfg)  # each repeat its own result
    assert config_hash(dataclasses.replace(cfg, epoch_time_s=2.0)) != config_hash(cfg)


def test_a_mix_ignores_degree_so_a_grid_over_degree_runs_it_once() -> None:
    one = load_config(compose(["cluster=local", "mix=tiny_mixed", "degree=1"]))
    two = load_config(compose(["cluster=local", "mix=tiny_mixed", "degree=2"]))
    assert config_hash(one) == config_hash(two) and two.degree == 1
    with pytest.raises(ConfigError, match=r"degree=3 conflicts with mix=tiny_mixed of 2 jobs"):
        load_config(compose(["cluster=local", "mix=tiny_mixed", "degree=3"]))


def test_repeats_are_interleaved_and_labelled() -> None:
    specs = [load(["degree=1", "repeats=3"]), load(["degree=2", "repeats=3"])]
    cells = sweep_cells(specs)
    assert [(c.label, c.config.repeat) for c in cells] == [
        ("tiny_cnn-naive-x1", 0),
        ("tiny_cnn-naive-x2", 0),
        ("tiny_cnn-naive-x1-r1", 1),
        ("tiny_cnn-naive-x2-r1", 1),
        ("tiny_cnn-naive-x1-r2", 2),
        ("tiny_cnn-naive-x2-r2", 2),
    ]
    assert len({c.config_hash for c in cells}) == 6
    assert cell_dir_names(cells) == [c.label for c in cells]


def test_a_mix_brings_the_solo_cell_of_each_job_with_its_amounts() -> None:
    mix = load(
        [
            "mix=tiny_mixed",
            "mode=mps",
            "epoch_samples=512",
            "mix.jobs.1.epoch_samples=4096",
            "mix.jobs.1.epoch_time_s=1.5",
            "mix.jobs.0.compile=default",
            "mode.active_thread_percentage=50",
        ]
    )
    solos = mix_solos(mix.config)
    assert [
        (s.workload.name, s.degree, s.mode.name, s.epoch_samples, s.epoch_time_s, s.trainer.compile) for s in solos
    ] == [("tiny_cnn", 1, "mps", 512, None, "default"), ("tiny_dlrm", 1, "mps", 4096, 1.5, "off")]
    assert all(s.mode.active_thread_percentage is None and not s.mix.jobs for s in solos)  # alone: the whole GPU
    # The solo of job 1 is the cell a user composes by hand: the same hash (so an earlier run is reused).
    by_hand = load(["workload=tiny_dlrm", "mode=mps", "epoch_samples=4096", "epoch_time_s=1.5"])
    assert validate_cell(solos[1]).config_hash == by_hand.config_hash
    job = mix.jobs[1]
    assert (job.epoch_samples, job.epoch_time_s) == (4096, 1.5)


def test_on_a_gpu_a_mix_solo_is_the_users_solo_of_its_settings_not_a_second_configuration() -> None:
    # A floorless solo (a mix's jobs run no floor) was another configuration beside the user's floored one
    # of the same settings on a GPU: run three times more, and pooled with it in the gains (review, 2026-12-05).
    gpu = ["cluster.backend=nvml", "epoch_samples=512"]
    user = [load(["workload=tiny_cnn", "degree=1", *gpu]), load(["mix=tiny_mixed", *gpu])]
    cells = sweep_cells(user)
    assert [c.label for c in cells] == ["tiny_cnn-naive-x1", "mix-tiny_mixed-naive", "tiny_dlrm-naive-x1"]
    solo = validate_cell(mix_solos(user[1].config)[0])
    assert solo.config_hash == user[0].config_hash and measured_floor(solo.config) == 5.0


def test_sweep_cells_adds_each_solo_once_and_keeps_the_users_cells_first() -> None:
    user = [load(["degree=1", "epoch_samples=512"]), load(["mix=tiny_mixed", "epoch_samples=512"])]
    cells = sweep_cells(user)
    assert [c.label for c in cells] == ["tiny_cnn-naive-x1", "mix-tiny_mixed-naive", "tiny_dlrm-naive-x1"]
    assert cells[2].config.tags == {"solo_of": "tiny_mixed"}


def test_cells_sharing_a_label_get_their_ids_as_directory_names() -> None:
    a, b = load(["epoch_samples=256"]), load(["epoch_samples=512"])
    assert a.label == b.label
    assert cell_dir_names([a, b]) == [a.cell_id, b.cell_id]
    assert cell_dir_names([a, a]) == [a.cell_id, f"{a.cell_id}-2"]  # the same config twice: numbered


def test_repeats_and_epoch_time_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"repeats=0 is not allowed; it must be an integer 1..1000"):
        load(["repeats=0"])
    with pytest.raises(ConfigError, match=r"epoch_time_s=-1.0 is not allowed"):
        load(["epoch_time_s=-1.0"])


@pytest.mark.parametrize(
    "jobs",
    [[], ["mix.jobs=[{workload:{name:tiny_cnn,batch_size:16}},{workload:tiny_dlrm,epochs:3}]"]],
    ids=["presets", "compositions"],
)
def test_a_mix_solo_cells_hydra_overrides_compose_it_again(jobs: list[str]) -> None:
    """Issue 31, item 5: the launcher wrote a ``Workload`` dataclass repr as ``workload=...`` into a mix's
    solo cell's ``.hydra/overrides.yaml``; now composing that file again gives the cell's config hash."""
    from raycolloc.driver.cell_specs import SweepOptions
    from raycolloc.driver.launcher import _origin

    overrides = [
        "cluster=local",
        "mix=tiny_mixed",
        "mode=mps",
        "epoch_samples=512",
        "repeats=2",
        *jobs,
        "mix.jobs.0.compile=default",
        "mode.active_thread_percentage=50",
        "trainer.fault=oom",
    ]
    mix = validate_cell(compose(overrides))
    solos = [s for s in sweep_cells([mix]) if s.mix_name is None]
    assert len(solos) == 4  # two jobs, two repeats each
    for solo in solos:
        origin = _origin([(compose(overrides), mix, SweepOptions())], [overrides], solo)
        assert not any("Workload(" in o for o in origin.overrides), origin.overrides
        assert validate_cell(compose(list(origin.overrides))).config_hash == solo.config_hash, origin.overrides
        assert load_config(origin.config).tags == {"solo_of": "tiny_mixed"}
