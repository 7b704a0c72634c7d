"""The entry point of a local replica process (server/router/spawn.py):

    python -m server.router.child PARENT_PID serve ARGS...

Before anything else it asks Linux to SIGKILL it when its parent dies (PR_SET_PDEATHSIG),
then checks that its parent is still PARENT_PID (else the parent died before the request
took effect, and it exits); then it runs `agentix ARGS...`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere only the check)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def main(argv: list[str]) -> None:
    die_with_parent(int(argv[0]))
    from server.cli import main as cli_main

    cli_main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
