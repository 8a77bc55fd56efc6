"""What runs inside the confined execution kernel, besides the shared
bootstrap (``remote/inside.py``): the sandbox's limits.

``python -m rlm_kernel.sandbox.inside --memory-mb N -f CONNECTION_FILE``
sets the memory limit (hard: the code cannot raise it) and starts an
ordinary ipykernel. :class:`ConfinedBootstrap` then enforces the per-cell
CPU limit and, after every cell, ends every process the cell left behind.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import Any

from rlm_kernel.remote.inside import EOF, MARK, Bootstrap, encode
from rlm_kernel.remote.inside import install as _install


class CPULimitExceeded(Exception):
    pass


class ConfinedBootstrap(Bootstrap):
    """``__rlm_sandbox__`` in the confined kernel: the shared bootstrap and the limits."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        shell.events.register("post_run_cell", self._after_cell)
        signal.signal(signal.SIGXCPU, self._cpu_exceeded)

    def _before_cell(self, *_: Any) -> None:
        super()._before_cell()
        if self.cpu_seconds:
            used = resource.getrusage(resource.RUSAGE_SELF)
            spent = used.ru_utime + used.ru_stime
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)  # set from outside before the cell, where it can be
            soft = int(spent + self.cpu_seconds) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))

    def _after_cell(self, *_: Any) -> None:
        end_left_processes()

    def _cpu_exceeded(self, *_: Any) -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY if hard == resource.RLIM_INFINITY else hard,
                                                 hard))
        raise CPULimitExceeded(f"the cell used more than {self.cpu_seconds:g} CPU seconds (--sandbox-cpu)")


def end_left_processes() -> list[int]:
    """Kill every process in the sandbox's pid namespace but the kernel
    (and bwrap's init, pid 1): nothing a cell starts outlives it."""
    me, killed = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, me):
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except (ProcessLookupError, PermissionError):
                pass
    for pid in killed:  # the kernel's own children: reap them (a zombie still answers kill(pid, 0))
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # not ours: bwrap's init reaps it
    return killed


def install(shell: Any) -> None:
    _install(shell, ConfinedBootstrap)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--memory-mb"]:
        limit = int(argv[1]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        argv = argv[2:]
    sys.argv = ["rlm-sandbox-kernel", *argv]
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


__all__ = ["EOF", "MARK", "ConfinedBootstrap", "encode", "end_left_processes", "install"]


if __name__ == "__main__":
    main(sys.argv[1:])
