"""raycolloc: collocation experiments for deep-learning training on NVIDIA GPUs, on Ray."""

from pathlib import Path

__all__ = ["__version__", "conf_dir"]

# The one place the version is written: pyproject.toml reads it, and results record it, also where
# raycolloc runs from a checkout on PYTHONPATH (the GPU machine) rather than an installed wheel.
__version__ = "0.1.0"


def conf_dir() -> Path:
    """The ``conf/`` tree every entry composes from (an absolute directory, as Hydra wants).

    An installed wheel carries it inside the package (``raycolloc/conf``: pyproject.toml maps the
    top-level ``conf/`` there); a checkout, on ``PYTHONPATH`` or installed editable, has it beside
    the package.

    Raises:
        FileNotFoundError: neither holds ``config.yaml`` (a broken install).
    """
    package = Path(__file__).resolve().parent
    candidates = (package / "conf", package.parent / "conf")  # the wheel's first: its own, never a neighbour's
    for candidate in candidates:
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"raycolloc's conf/ tree is missing: looked in {' and '.join(map(str, candidates))}")
