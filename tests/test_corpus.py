"""The measured corpus (corpus/, jobs/corpus.py): every committed row says how it was measured, and
the measuring script resumes from what the corpus holds."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from .conftest import ROOT

CORPUS = ROOT / "corpus"


@dataclasses.dataclass(frozen=True)
class Tables:  # what analysis.load gives the export: one frame per table
    cells: pd.DataFrame
    jobs: pd.DataFrame
    epochs: pd.DataFrame
    telemetry: pd.DataFrame


def _script() -> ModuleType:  # jobs/ is no package: load the script as a module
    spec = importlib.util.spec_from_file_location("corpus_script", ROOT / "jobs" / "corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_committed_cell_names_its_gpu_commit_date_and_command() -> None:
    cells = pd.read_parquet(CORPUS / "cells.parquet")
    for column in ("entry", "gpu_name", "commit", "measured_on", "command", "mode", "degree", "status"):
        assert cells[column].notna().all(), column
    assert (cells["backend"] == "nvml").all()  # measured on a real GPU, not the simulated backend
    assert cells["command"].str.startswith("python -m raycolloc.sweep ").all()
    jobs = pd.read_parquet(CORPUS / "jobs.parquet")
    assert set(jobs["cell_id"]) <= set(cells["cell_id"])  # every job belongs to a committed cell
    ok = cells[cells["status"] == "ok"]
    singles = ok[~ok["entry"].str.startswith("mix_")]
    assert singles["agg_samples_per_s"].gt(0).all()
    # at least seven models, each with naive and MPS solos
    solos = singles[singles["degree"] == 1].groupby("entry")["mode"].agg(set)
    assert len(solos) >= 7 and all(m == {"naive", "mps"} for m in solos)


def test_the_readme_lists_every_entry_the_corpus_holds() -> None:
    cells = pd.read_parquet(CORPUS / "cells.parquet")
    readme = (CORPUS / "README.md").read_text()
    assert all(f"| {entry} |" in readme for entry in cells["entry"].unique())


def test_measure_plans_only_what_the_corpus_lacks(tmp_path: Path) -> None:
    corpus = _script()
    entry = next(e for e in corpus.SIM_ENTRIES if e.name == "tiny_cnn")
    assert corpus.steps(entry, [1, 2, 3], set()) == [(entry, "naive,mps", [1, 2, 3])]
    done = {("tiny_cnn", "naive", 1), ("tiny_cnn", "naive", 2), ("tiny_cnn", "mps", 1)}
    assert corpus.steps(entry, [1, 2, 3], done) == [(entry, "naive", [3]), (entry, "mps", [2, 3])]
    every = {("tiny_cnn", m, d) for m in ("naive", "mps") for d in (1, 2, 3)}
    assert corpus.steps(entry, [1, 2, 3], every) == []
    # what the corpus holds, read back per GPU model: a cell that could not fit is a measurement too
    pd.DataFrame(
        {
            "entry": ["tiny_cnn"] * 3,
            "gpu_name": ["sim", "sim", "other"],
            "status": ["ok", "unfit", "ok"],
            "mode": ["naive", "mps", "mps"],
            "degree": [1, 3, 2],
        }
    ).to_parquet(tmp_path / "cells.parquet")
    assert corpus.measured(tmp_path, "sim") == {("tiny_cnn", "naive", 1), ("tiny_cnn", "mps", 3)}
    # a second pass measures again what the first holds, and resumes from its own runs alone
    assert corpus.measured(tmp_path, "sim", again="p2") == set()
    cells = pd.read_parquet(tmp_path / "cells.parquet").assign(**{"pass": ["first", "p2", "p2"]})
    cells.to_parquet(tmp_path / "cells.parquet")
    assert corpus.measured(tmp_path, "sim", again="p2") == {("tiny_cnn", "mps", 3)}


def test_a_second_pass_adds_its_runs_under_ids_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _script()
    entry = next(e for e in corpus.SIM_ENTRIES if e.name == "tiny_cnn")
    sweep = tmp_path / "sweep"
    run = sweep / "0"
    cell = pd.DataFrame(
        {"cell_id": ["tiny_cnn-naive-x1-abc"], "cell_dir": [str(run)], "gpu_name": ["sim"], "status": ["ok"]}
    )
    frames = {"cells": cell, "jobs": cell[["cell_id"]].assign(job_index=[0]), "epochs": cell[["cell_id"]].iloc[:0]}
    frames["telemetry"] = pd.DataFrame({"cell_id": ["tiny_cnn-naive-x1-abc"], "ts": [1.0], "scope": ["gpu"]})
    frames["cells"] = frames["cells"].assign(measured_start_ts=[0.0], measured_end_ts=[2.0])

    data = Tables(**frames)
    monkeypatch.setattr(corpus, "load_sweeps", lambda dirs, all_results: data)  # the sweep's tables
    out = tmp_path / "corpus"
    assert corpus.export(out, entry, sweep, "sim", "python -m raycolloc.sweep x") == 1
    assert corpus.export(out, entry, sweep, "sim", "python -m raycolloc.sweep x") == 0  # held already
    assert corpus.export(out, entry, sweep, "sim", "python -m raycolloc.sweep x", again="p2") == 1
    cells = pd.read_parquet(out / "cells.parquet")
    assert list(cells["cell_id"]) == ["tiny_cnn-naive-x1-abc", "tiny_cnn-naive-x1-abc@p2"]
    assert list(cells["pass"]) == ["first", "p2"]
    assert set(pd.read_parquet(out / "jobs.parquet")["cell_id"]) == set(cells["cell_id"])


def test_pool_makes_one_corpus_of_the_passes_and_refuses_one_given_twice(tmp_path: Path) -> None:
    corpus = _script()
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, ids, passes in ((first, ["a", "b"], None), (second, ["a@p2"], ["p2"])):
        folder.mkdir()
        cells = pd.DataFrame({"cell_id": ids, "entry": ["tiny_cnn"] * len(ids)})
        (cells.assign(**{"pass": passes}) if passes else cells).to_parquet(folder / "cells.parquet")
        pd.DataFrame({"cell_id": ids, "job_index": [0] * len(ids)}).to_parquet(folder / "jobs.parquet")
    assert corpus.main(["pool", str(tmp_path / "out"), str(first), str(second)]) == 0
    cells = pd.read_parquet(tmp_path / "out" / "cells.parquet")
    assert list(cells["cell_id"]) == ["a", "b", "a@p2"] and list(cells["pass"]) == ["first", "first", "p2"]
    assert len(pd.read_parquet(tmp_path / "out" / "jobs.parquet")) == 3
    assert corpus.main(["pool", str(tmp_path / "twice"), str(first), str(first)]) == 2


def test_the_committed_passes_name_their_pass_in_every_row() -> None:
    for folder in sorted((CORPUS / "passes").iterdir()):
        cells = pd.read_parquet(folder / "cells.parquet")
        assert (cells["pass"] == folder.name).all() and cells["cell_id"].str.endswith(f"@{folder.name}").all()
        assert (cells["backend"] == "nvml").all() and cells["command"].str.startswith(
            "python -m raycolloc.sweep "
        ).all()
        jobs = pd.read_parquet(folder / "jobs.parquet")
        assert set(jobs["cell_id"]) <= set(cells["cell_id"])
        assert (folder / "README.md").read_text().count(folder.name) >= 1


def test_a_pass_name_that_would_break_a_path_or_an_override_is_refused(tmp_path: Path) -> None:
    corpus = _script()
    for name in ("first", "a,b", "x/y", "k=v", ""):
        args = ["measure", str(tmp_path), "--backend", "sim", "--pass", name]
        assert corpus.main(args) == 2, name
    assert not list(tmp_path.iterdir())  # refused before anything ran or was written


def test_a_pass_runs_its_sweeps_in_an_output_of_its_own() -> None:
    """A pass's sweeps reuse no earlier run: a cell of the same config in the first pass's output would be
    reused (resume by config hash) instead of measured again."""
    corpus = _script()
    entry = next(e for e in corpus.SIM_ENTRIES if e.name == "tiny_cnn")
    work = Path("/w")
    first = corpus.sweep_words(entry, "naive", [1], "sim", work, 3.0)
    again = corpus.sweep_words(entry, "naive", [1], "sim", work, 3.0, "p2")
    assert "out_dir=/w/res" in first and "out_dir=/w/res-p2" in again
    assert "hydra.sweep.dir=/w/res-p2/tiny_cnn/naive" in again
    assert corpus.sweep_dir(work, entry, "naive", "p2") == Path("/w/res-p2/tiny_cnn/naive")
