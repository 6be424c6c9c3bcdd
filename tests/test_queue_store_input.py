"""A queue database that cannot be one, and one made before a queue key existed (issue 33, review
items 5 and 13): a ``queue.db`` that is a text file, a directory or under a folder that cannot be made
is refused naming ``queue.db`` and why, with exit 2 and no traceback; a database claimed before
``queue.profiles`` existed is still accepted while that key is at its default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raycolloc.config_groups import QueueConfig
from raycolloc.queue.__main__ import main
from raycolloc.queue.replay import _LATER_KEYS, _UNCLAIMED, run_settings
from raycolloc.queue.state import ConfigMismatch, Store, StoreUnusable
from raycolloc.queue.trace import FIELDS


def _bad_db(tmp_path: Path, what: str) -> Path:
    if what == "text":
        (tmp_path / "q.sqlite").write_text("not a database, just text\n" * 100)
        return tmp_path / "q.sqlite"
    if what == "directory":
        (tmp_path / "q.sqlite").mkdir()
        return tmp_path / "q.sqlite"
    return Path("/proc/nope/x.sqlite")  # a folder that cannot be made


@pytest.mark.parametrize("what", ["text", "directory", "missing folder"])
def test_a_queue_db_that_is_no_database_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    db = _bad_db(tmp_path, what)
    with pytest.raises(StoreUnusable, match=rf"queue.db={db}: not usable"):
        Store(db)
    trace = tmp_path / "t.csv"
    trace.write_text(f"{','.join(FIELDS)}\nj1,0,timm,resnet50,imagenet64,,,1000,\n")
    assert main(["replay", str(trace), "cluster=local", f"queue.db={db}"]) == 2
    err = capsys.readouterr().err
    assert f"queue.db={db}: not usable" in err and "Traceback" not in err


def test_a_database_claimed_before_queue_profiles_existed_is_accepted_at_its_default(tmp_path: Path) -> None:
    queue = QueueConfig()
    assert queue.profiles is None and _LATER_KEYS["profiles"] is None  # the default kept out of the digest
    # The settings as a database made before the later keys recorded them: every claimed key but those.
    old = {f"queue.{k}": v for k, v in dataclasses.asdict(queue).items() if k not in _UNCLAIMED | set(_LATER_KEYS)}
    store = Store(tmp_path / "q.sqlite")
    store.claim_config(old)
    # The same run today, with no margins, in arrival order and exact bins (as it ran before they existed): accepted.
    as_then = dataclasses.replace(queue, slowdown_margin=0.0, min_gain=0.0, order="arrival", carma_estimator="bins")
    store.claim_config(run_settings(as_then))
    with pytest.raises(ConfigMismatch, match=r'queue.profiles=null there, "catalog" now'):
        store.claim_config(run_settings(dataclasses.replace(as_then, profiles="catalog")))
    store.close()


def test_a_database_made_before_the_margins_and_the_order_resumes_as_it_ran_or_is_refused_naming_them(
    tmp_path: Path,
) -> None:
    from raycolloc.queue.replay import claim_run
    from raycolloc.queue.settings import compose_settings

    settings = compose_settings([f"out_dir={tmp_path}"])
    assert (settings.config.queue.slowdown_margin, settings.config.queue.min_gain) == (0.10, 0.05)
    margins = ("queue.slowdown_margin", "queue.min_gain", "queue.order")
    store = Store(tmp_path / "q.sqlite")
    store.claim_config({k: v for k, v in run_settings(settings.config.queue).items() if k not in margins})
    with pytest.raises(ConfigMismatch, match=r"min_gain=null there, 0.05 now.*ran as queue.slowdown_margin=0.0"):
        claim_run(store, "t", "shape", settings)  # the default margins would change how it runs: refused
    with pytest.raises(ConfigMismatch, match=r'queue.order=null there, "longest" now.*ran as .*queue.order="arrival"'):
        claim_run(
            store,
            "t",
            "shape",
            compose_settings([f"out_dir={tmp_path}", "queue.slowdown_margin=0", "queue.min_gain=0"]),
        )
    as_then = compose_settings(
        [f"out_dir={tmp_path}", "queue.slowdown_margin=0", "queue.min_gain=0", "queue.order=arrival"]
    )
    claim_run(store, "t", "shape", as_then)  # as it ran: accepted
    store.close()


def test_a_ray_replays_directory_does_not_name_the_catalogues_gpu_and_an_old_named_one_is_resumed(
    tmp_path: Path,
) -> None:
    from raycolloc.queue.replay import run_dir
    from raycolloc.queue.settings import compose_settings

    words = [f"out_dir={tmp_path}", "queue.runner=ray", "cluster.backend=nvml"]
    settings = compose_settings(words)  # cluster.gpu_model is the catalogue's H100-80GB: not the GPUs run on
    trace = tmp_path / "t2.csv"
    assert run_dir(trace, settings) == tmp_path / "queue" / "t2-raycolloc-ray-nvml"
    old = tmp_path / "queue" / "t2-raycolloc-ray-nvml-H100-80GB"
    old.mkdir(parents=True)
    assert run_dir(trace, settings).name == "t2-raycolloc-ray-nvml"  # a folder with no database: not a run
    Store(old / "queue.sqlite").close()
    assert run_dir(trace, settings) == old  # made under the name before: resumed there
    assert run_dir(trace, compose_settings([*words[:1], "cluster.num_gpus=2"])).name == "t2-raycolloc-1x2-H100-80GB"
