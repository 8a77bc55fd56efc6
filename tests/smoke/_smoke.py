"""Helpers for the smoke tests (fixtures live in conftest.py).

The model is far too small to follow the protocol, so these tests never look
at its answers: they check that runs end cleanly, within their budgets, with
a valid notebook, whatever it replies."""

from __future__ import annotations

from pathlib import Path

# The reasons a run may end with against this model; "error" (a failed root
# call) and "interrupted" are not among them.
CLEAN_ENDS = {"final", "max_iterations", "budget", "timeout"}


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
