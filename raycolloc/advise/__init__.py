"""The collocation advisor: from a short solo profile of each workload, predict memory fit,
throughput, each job's slowdown and energy per sample for every mode and degree, rank them, and
check the model against measured sweeps (``python -m raycolloc.advise``; see ``__main__``).

``profile`` reads a solo cell into a :class:`~raycolloc.advise.profile.Profile`; ``model`` predicts a
configuration from profiles; ``fit`` fits its few parameters on measured cells of other workloads;
``rank`` weighs the configurations; ``validate`` compares the model with a sweep; ``run`` profiles
through the engine; ``emit`` writes the advice as a sweep and a radT plan.
"""
