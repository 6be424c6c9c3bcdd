"""raycolloc: collocation experiments for deep-learning training on NVIDIA GPUs, on Ray."""

# The one place the version is written: pyproject.toml reads it, and results record it, also where
# raycolloc runs from a checkout on PYTHONPATH (the GPU machine) rather than an installed wheel.
__version__ = "0.1.0"
