"""The launcher of a script job: ``python -m raycolloc.job.script_exec PARENT CPUS DEVICE -- COMMAND...``.

It binds its own process to the job, then ``exec``s the user's command, so the job's process *is*
the script (same pid, as radT starts it): pinned to the binding's cores before any thread starts
(every thread inherits them), at normal priority, killed when its actor ends (the death signal
survives ``exec``), with the script's own ``PYTHONPATH`` back. It first attaches to the binding's
device (``DEVICE``, :func:`encode_device`): a simulated GPU accounts the process there, as a CUDA
driver would when the script initialises CUDA; a real GPU's driver needs nothing. Kept apart from
``raycolloc.job.script`` so that it imports almost nothing before the exec.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys

from raycolloc.devices import JobDevice
from raycolloc.procs import die_with_parent, normal_priority

__all__ = ["PYTHONPATH_KEEP", "decode_device", "encode_device", "main"]

PYTHONPATH_KEEP = "RAYCOLLOC_SCRIPT_PYTHONPATH"  # the script's own PYTHONPATH, restored before exec


def encode_device(device: JobDevice) -> str:
    """The binding's device as one command-line word (the launcher's ``DEVICE``)."""
    return pickle.dumps(device).hex()


def decode_device(word: str) -> JobDevice:
    """The device :func:`encode_device` wrote (its class is imported as it unpickles: the node's
    backend chose it, this package never names it)."""
    device: JobDevice = pickle.loads(bytes.fromhex(word))  # written by our own trainer, never read from a user
    return device


def main(argv: list[str] | None = None) -> None:
    """Bind this process to the job and exec the command (exit 127 if it cannot be run)."""
    args = list(argv or sys.argv[1:])
    parent, cpus, device, command = int(args[0]), args[1], decode_device(args[2]), args[4:]
    die_with_parent(parent)
    # A sweep's local Ray starts with SIGTERM blocked (raycolloc.driver.signals), and every process under
    # it inherits the mask: the script gets SIGTERM back, as it has it when run by hand.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if cpus != "-":
        # Before the script starts a thread: every thread of it inherits the job's cores.
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    normal_priority()
    own = os.environ.pop(PYTHONPATH_KEEP, "")
    if own:
        os.environ["PYTHONPATH"] = own
    else:
        os.environ.pop("PYTHONPATH", None)
    # A simulated driver: the process joins the cell's MPS daemon if one answers and holds a context
    # on its device (its own memory use is not known from outside: none is claimed).
    device.attach(os.getpid(), lambda: 0, len(os.sched_getaffinity(0)))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"raycolloc: cannot run {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)


if __name__ == "__main__":
    main()
