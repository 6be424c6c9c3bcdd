"""Values Hydra's grammar reads only quoted (issue 29, item 4): the refusal gives the quoted override
to type, and that form, typed as a shell would pass it, composes to the value the user meant.

The inputs are the issue's: a regular expression, an ``out_dir`` with a non-ASCII letter, a
``hydra.sweep.dir`` with ``;`` or ``$(``. Each runs through the real entry point in this process.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from raycolloc.driver.override_quoting import hydra_quote, quoted_override

from .conftest import compose
from .test_malformed_inputs import BASE, run_main

REGEX = r"^epoch (?P<epoch>\d+) done samples=(?P<samples>\d+)"


@pytest.mark.parametrize(
    "value",
    [
        REGEX,
        "/tmp/x/résultats",
        "/tmp/x/a;b",
        "/tmp/x/$(x)",
        'say "hi"',
        "it's",
        """it's "both" \\" \\' """,
        "trailing\\",
        "trailing\\\\",
        'ends"',
        "a\\'b",
        "",
        "a,b",
        "[not a list]",
        "tab\there",
        "ü=ö",
    ],
)
def test_a_quoted_value_reads_back_unchanged(value: str) -> None:
    parsed = OverridesParser.create().parse_override(f"key={hydra_quote(value)}")
    assert parsed.value() == value


def _suggestion(text: str) -> str:
    found = re.search(r"typed as (.*) \(see https://hydra\.cc", text)
    assert found, text[-2000:]
    return found.group(1)


@pytest.mark.parametrize(
    ("multirun", "override", "key"),
    [
        (False, "out_dir={tmp}/résultats", "out_dir"),
        (True, "hydra.sweep.dir={tmp}/a;b", "hydra.sweep.dir"),
        (True, "hydra.sweep.dir={tmp}/$(x)", "hydra.sweep.dir"),
        (False, f"workload.epoch_regex={REGEX}", "workload.epoch_regex"),
    ],
    ids=["out-dir-non-ascii", "sweep-dir-semicolon", "sweep-dir-dollar-paren", "epoch-regex"],
)
def test_the_suggested_form_runs_and_means_the_value(
    multirun: bool, override: str, key: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    override = override.replace("{tmp}", str(tmp_path))
    value = override.split("=", 1)[1]
    flags = ["-m"] if multirun else []
    # A script job takes no epoch_samples (BASE's): it runs as written.
    script = (
        ["workload=script", "workload.command=[python,jobs/examples/plain_train.py]", "epoch_samples=null"]
        if "regex" in key
        else []
    )
    out = [] if key == "out_dir" else [f"out_dir={tmp_path / 'out'}"]
    code, text = run_main([*flags, *BASE, *out, *script, override, "+dry_run=true"], capfd)
    assert code == 2 and "Traceback" not in text, text[-3000:]
    typed = _suggestion(text)
    assert typed == quoted_override(override)
    words = shlex.split(typed)  # as a POSIX shell passes it
    assert len(words) == 1
    code, text = run_main([*flags, *BASE, *out, *script, *words, "+dry_run=true"], capfd)
    assert code == 0, text[-3000:]
    if not key.startswith("hydra."):  # hydra.* is Hydra's own config: test_hydra_sweep_dir_reads_back_quoted
        assert OmegaConf.select(compose([*BASE, *out, *script, *words]), key) == value
    assert not (tmp_path / "a;b").exists() and not (tmp_path / "$(x)").exists()  # a dry run leaves no sweep dir


def test_hydra_sweep_dir_reads_back_quoted(tmp_path: Path) -> None:
    """``hydra.*`` keys are composed only with Hydra's own config: the quoted path is the sweep directory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from .conftest import CONF

    for path in (f"{tmp_path}/a;b", f"{tmp_path}/$(x)", f"{tmp_path}/résultats"):
        words = shlex.split(quoted_override(f"hydra.sweep.dir={path}") or "")
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[*BASE, *words], return_hydra_config=True)
        assert cfg.hydra.sweep.dir == path
