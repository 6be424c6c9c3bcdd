"""Commands to one MPS control daemon take turns, and a busy daemon's refusal is asked again (issue 46,
item 9: on one H200, seven script jobs' watches asking one daemon at once got "Cannot send command to
MPS control daemon process" and 4 of 10 jobs were never seen as clients)."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from raycolloc.mpsctl import BUSY, MpsError, control_command

# A control tool that, like the real one, cannot reach a daemon another control client is talking to:
# it holds a marker file while it answers and refuses when the marker is there.
TOOL = """\
#!/bin/sh
marker="$CUDA_MPS_PIPE_DIRECTORY/busy"
if ! mkdir "$marker" 2>/dev/null; then
  echo "{busy} process" >&2
  exit 1
fi
read -r command
sleep 0.05
rmdir "$marker"
echo "{reply} $command"
"""


def _tool(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "control"
    tool.write_text(body)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(tool)


def test_many_askers_of_one_daemon_each_get_their_reply(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    control = _tool(tmp_path, TOOL.format(busy=BUSY, reply="ok"))
    replies: list[str] = []
    errors: list[Exception] = []

    def ask(k: int) -> None:
        try:
            replies.append(control_command(control, str(pipe), f"get_client_list {k}"))
        except MpsError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(replies) == sorted(f"ok get_client_list {k}" for k in range(12))
    assert (tmp_path / "pipe.control.lock").exists()  # the turns' lock lies beside the pipe directory


def test_a_daemon_that_stays_busy_is_reported_and_other_failures_are_not_retried(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    (pipe / "busy").mkdir(parents=True)  # another client never lets go
    control = _tool(tmp_path, TOOL.format(busy=BUSY, reply="ok"))
    with pytest.raises(MpsError, match="Cannot send command"):
        control_command(control, str(pipe), "get_server_list")
    calls = tmp_path / "calls"
    broken = _tool(tmp_path, f'#!/bin/sh\necho x >> "{calls}"\necho "no such daemon" >&2\nexit 1\n')
    with pytest.raises(MpsError, match="no such daemon"):
        control_command(broken, str(pipe), "get_server_list")
    assert calls.read_text().count("x") == 1  # asked once: only a busy daemon is asked again
