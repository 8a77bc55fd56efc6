"""The names the live protocol's three ends share on the Python side (the
kernel's ``sinks/live.py``, the Jupyter server's ``server/``; the page's are
in ``labextension/src/protocol.ts``): the protocol's name, the comm target,
and the synthetic parent msg_ids a run's outputs go under
(docs/live-protocol.md)."""

from __future__ import annotations

import re

PROTOCOL = "rlm/1"
COMM_TARGET = "rlm"
_SYNTHETIC = re.compile(r"^rlm-(.+)-(\d+)$")


def step_msg_id(cell_id: str) -> str:
    """The synthetic parent msg_id a generated cell's code runs under."""
    return f"rlm-{cell_id}-1"


def anchor_msg_id(cell_id: str) -> str:
    """The synthetic parent msg_id a ``%%rlm`` cell's own outputs go under
    while the notebook's writer is the Jupyter server (``anchor_started``)."""
    return f"rlm-{cell_id}-0"


def synthetic_cell(msg_id: str) -> str | None:
    """The cell a synthetic parent msg_id ``rlm-<cell id>-<n>`` names (cell
    ids may hold dashes: only the last ``-<n>`` is taken off), else None."""
    match = _SYNTHETIC.match(msg_id or "")
    return match.group(1) if match else None


__all__ = ["COMM_TARGET", "PROTOCOL", "anchor_msg_id", "step_msg_id", "synthetic_cell"]
