"""raycolloc's Hydra launcher: cells of a multirun as concurrent Ray tasks."""
