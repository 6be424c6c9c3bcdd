"""raycolloc's job queue: training jobs arrive over time and are placed on GPUs, several per GPU
where a policy allows (``python -m raycolloc.queue``; README, "Queue").

``trace`` / ``tracegen``: traces read strictly and generated; ``catalog``: the simulated cluster's
workloads; ``state``: the SQLite state every event goes through (``dblock``: one owning process;
``dbcheck``: the database checked as it is opened; ``ledger``: its events beside it, so that a lost
``-wal`` file is noticed); ``policy`` and ``policies``: the placement rules as plugins;
``simcluster``: the simulated GPUs' truth (the advisor's model);
``core``: the queue's loop, the same for every cluster; ``replay`` and ``report``: a trace run to its
end and its rows.
"""

__all__: list[str] = []
