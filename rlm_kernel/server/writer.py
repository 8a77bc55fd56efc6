"""The one writer of a kernel's runs into its notebook's shared document
(jupyter_ydoc's ``YNotebook``, the document every page of the notebook
shares under real-time collaboration): the ops of ``docs/live-protocol.md``
and the iopub messages of the run's cells, applied once, on the server.

What a page's ``live.ts`` and ``takeover.ts`` do to a notebook model, this
does to the shared one: inserts the cells a run announces (with their ids,
trusted, right below the cell before them), streams each cell's outputs into
it, sets counts and running states, merges ``metadata.rlm``, answers
``get_cells`` with the document's cells. It never touches a cell the run did
not make, but the ``%%rlm`` cell's outputs, count and ``follows`` mark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..live_protocol import synthetic_cell
from .outputs import CellOutputs, youtput

_MAX_PENDING = 500
ORIGIN = "rlm-kernel"


@dataclass
class _Run:
    anchor: str | None = None
    cells: list[str] = field(default_factory=list)  # its cells written so far, in order


@dataclass
class _Anchor:
    cell_id: str
    count: int | None


class NotebookWriter:
    """One kernel's runs, written into ``notebook`` (a ``YNotebook``) by
    :meth:`apply` (an op) and :meth:`route` (an iopub message of a run's
    cell); call both inside a transaction of the notebook's document."""

    def __init__(self) -> None:
        self.runs: dict[str, _Run] = {}
        self.routes: dict[str, str] = {}  # parent msg_id -> the cell its outputs go into
        self.anchors: dict[str, _Anchor] = {}  # a %%rlm cell's request msg_id -> its cell, until its 'idle'
        self.outputs = CellOutputs()
        self.pending: list[dict[str, Any]] = []  # inserts whose place is not there yet
        self.live_cells: set[str] = set()  # the cells of runs not ended (routed by a msg_id's form too)
        self._where: dict[str, int] = {}  # cell id -> the index it was last seen at

    # -- which messages are ours ------------------------------------------------
    def concerns(self, msg_type: str, parent_msg_id: str | None) -> bool:
        """Whether an iopub message goes into a run's cell (or ends a ``%%rlm``
        cell's request), so it must be routed."""
        if not parent_msg_id:
            return False
        if msg_type == "status":
            return parent_msg_id in self.anchors
        return self._target(parent_msg_id) is not None

    def _target(self, parent_msg_id: str) -> str | None:
        """The cell a parent msg_id's outputs go into: announced by
        ``cell_started``, else (this writer missed it) by the msg_id's form."""
        cell_id = self.routes.get(parent_msg_id)
        if cell_id is None:
            named = synthetic_cell(parent_msg_id)
            cell_id = named if named in self.live_cells else None
        return cell_id

    # -- the shared notebook ----------------------------------------------------
    def index(self, notebook: Any, cell_id: str | None) -> int:
        """The index of the cell ``cell_id`` now, or -1."""
        if not cell_id:
            return -1
        ycells = notebook.ycells
        guess = self._where.get(cell_id)
        if guess is not None and guess < len(ycells) and ycells[guess].get("id") == cell_id:
            return guess
        for i, ycell in enumerate(ycells):
            self._where[str(ycell.get("id"))] = i
            if ycell.get("id") == cell_id:
                return i
        self._where.pop(cell_id, None)
        return -1

    def cell(self, notebook: Any, cell_id: str | None) -> Any:
        index = self.index(notebook, cell_id)
        return notebook.ycells[index] if index >= 0 else None

    # -- ops -------------------------------------------------------------------------
    def apply(self, notebook: Any, op: dict[str, Any]) -> dict[str, Any] | None:
        """Apply one op; returns the answer to send the kernel, if any (``cells``)."""
        name = op.get("op")
        handler = getattr(self, f"_op_{name}", None)
        return handler(notebook, op) if handler is not None else None

    def _run(self, run_id: Any) -> _Run:
        return self.runs.setdefault(str(run_id), _Run())

    def _op_run_started(self, notebook: Any, op: dict[str, Any]) -> None:
        run = self._run(op.get("run_id"))
        run.anchor = op.get("anchor_cell_id")
        anchor = self.cell(notebook, run.anchor)
        if anchor is not None:
            rlm = dict(anchor["metadata"].get("rlm") or {})
            follows = op.get("follows")
            if rlm.get("follows") != follows:
                anchor["metadata"]["rlm"] = {**rlm, "follows": follows}

    def _op_anchor_started(self, notebook: Any, op: dict[str, Any]) -> None:
        cell_id, msg_id = op.get("cell_id"), op.get("msg_id")
        if not cell_id or not msg_id:
            return
        self.routes[msg_id] = cell_id
        self.outputs.forget(cell_id)
        if op.get("request_msg_id"):
            self.anchors[op["request_msg_id"]] = _Anchor(cell_id, op.get("execution_count"))
        # Its running state is the page's that ran it (JupyterLab sets it as it sends the request).

    def _op_anchor_finished(self, notebook: Any, op: dict[str, Any]) -> dict[str, Any]:
        """The ``%%rlm`` cell's request is about to be answered: its count and
        idle state, in one change, before the page that ran it gets its reply
        (the kernel waits for the answer below): that page then finds them set
        and sets nothing, and no page sets its idle state because the count
        changed alone (JupyterLab 4.6 does, and two clients setting one key at
        once is what it reports as "Caught error while handling a Yjs update")."""
        ycell = self.cell(notebook, op.get("cell_id"))
        if ycell is not None and ycell.get("cell_type") == "code":
            _set(ycell, "execution_count", op.get("execution_count"))
            _set(ycell, "execution_state", "idle")
        return {"op": "anchor_written", "cell_id": op.get("cell_id")}

    def _op_insert_cell(self, notebook: Any, op: dict[str, Any]) -> None:
        if not self._insert(notebook, op):
            self.pending = (self.pending + [op])[-_MAX_PENDING:]
            return
        self._retry_pending(notebook)

    def _insert(self, notebook: Any, op: dict[str, Any]) -> bool:
        cell = op.get("cell") or {}
        cell_id = cell.get("id")
        if not cell_id:
            return True
        run = self._run(op.get("run_id"))
        existing = self.cell(notebook, cell_id)
        if existing is not None:
            if existing.get("cell_type") == cell.get("cell_type"):
                self._set_source(notebook, cell_id, _text(cell.get("source")))
                if isinstance((cell.get("metadata") or {}).get("rlm"), dict):
                    existing["metadata"]["rlm"] = cell["metadata"]["rlm"]
                return True
            self._delete(notebook, cell_id)  # a draft that turned out another kind of cell
        after = op.get("after_cell_id")
        if self.index(notebook, after) < 0:
            after = self._last_placed(notebook, run)
        return self._place(notebook, run, after, {**cell, "outputs": [], "execution_count": None})

    def _place(self, notebook: Any, run: _Run, after: str | None, cell: dict[str, Any]) -> bool:
        index = self.index(notebook, after)
        if index < 0:
            return False
        value = {"id": cell["id"], "cell_type": cell.get("cell_type", "code"), "source": _text(cell.get("source")),
                 "metadata": {**(cell.get("metadata") or {}), "trusted": True}}
        if value["cell_type"] == "code":
            value["outputs"] = []
            value["execution_count"] = cell.get("execution_count")
        ycell = notebook.create_ycell(value)
        notebook.ycells.insert(index + 1, ycell)
        for output in cell.get("outputs") or []:
            ycell["outputs"].append(youtput({k: v for k, v in output.items() if k != "transient"}))
        self._where[cell["id"]] = index + 1
        if cell["id"] not in run.cells:
            run.cells.append(cell["id"])
        self.live_cells.add(cell["id"])
        return True

    def _last_placed(self, notebook: Any, run: _Run) -> str | None:
        for cell_id in reversed(run.cells):
            if self.index(notebook, cell_id) >= 0:
                return cell_id
        return run.anchor if self.index(notebook, run.anchor) >= 0 else None

    def _retry_pending(self, notebook: Any) -> None:
        progressed = True
        while progressed and self.pending:
            progressed = False
            for op in list(self.pending):
                if self._insert(notebook, op):
                    self.pending.remove(op)
                    progressed = True

    def _set_source(self, notebook: Any, cell_id: str, source: str) -> None:
        index = self.index(notebook, cell_id)
        if index >= 0 and str(notebook.ycells[index]["source"]) != source:
            notebook.set_cell(index, source=source)

    def _delete(self, notebook: Any, cell_id: str) -> None:
        index = self.index(notebook, cell_id)
        if index >= 0:
            del notebook.ycells[index]
            self._where.pop(cell_id, None)
            self.outputs.forget(cell_id)

    def _op_cell_text(self, notebook: Any, op: dict[str, Any]) -> None:
        self._set_source(notebook, str(op.get("cell_id")), _text(op.get("source")))

    def _op_remove_cells(self, notebook: Any, op: dict[str, Any]) -> None:
        for cell_id in op.get("cell_ids") or []:
            ycell = self.cell(notebook, cell_id)
            if ycell is not None and (ycell["metadata"].get("rlm") or {}).get("draft") is True:
                self._delete(notebook, cell_id)

    def _op_cell_started(self, notebook: Any, op: dict[str, Any]) -> None:
        cell_id, msg_id = op.get("cell_id"), op.get("msg_id")
        if not cell_id or not msg_id:
            return
        self.routes[msg_id] = cell_id
        run = self._run(op.get("run_id"))
        if cell_id not in run.cells:
            run.cells.append(cell_id)
        self.live_cells.add(cell_id)
        ycell = self.cell(notebook, cell_id)
        if ycell is not None and ycell.get("cell_type") == "code":
            _set(ycell, "execution_state", "running")

    def _op_cell_finished(self, notebook: Any, op: dict[str, Any]) -> None:
        ycell = self.cell(notebook, op.get("cell_id"))
        if ycell is None:
            return
        patch = op.get("metadata")
        if isinstance(patch, dict):
            ycell["metadata"]["rlm"] = {**(ycell["metadata"].get("rlm") or {}), **patch}
        if ycell.get("cell_type") != "code":
            return
        outputs = op.get("outputs") or []
        if outputs and not len(ycell["outputs"]):
            for output in outputs:
                ycell["outputs"].append(youtput(output))
        _set(ycell, "execution_count", op.get("execution_count"))
        _set(ycell, "execution_state", "idle")

    def _op_run_ended(self, notebook: Any, op: dict[str, Any]) -> None:
        run = self._run(op.get("run_id"))
        self.pending = [p for p in self.pending if p.get("run_id") != op.get("run_id")]
        ours = set(run.cells)
        self.routes = {msg_id: cell_id for msg_id, cell_id in self.routes.items() if cell_id not in ours}
        self.live_cells -= ours
        for cell_id in run.cells:
            ycell = self.cell(notebook, cell_id)
            if ycell is not None and ycell.get("cell_type") == "code" and ycell.get("execution_state") == "running":
                _set(ycell, "execution_state", "idle")
            self.outputs.forget(cell_id)

    def _op_resync(self, notebook: Any, op: dict[str, Any]) -> None:
        """The kernel's copy of the run so far (this writer said hello mid-run):
        the cells the document lacks go in, in order, below the anchor."""
        run = self._run(op.get("run_id"))
        run.anchor = op.get("anchor_cell_id") or run.anchor
        previous = run.anchor
        for cell in op.get("cells") or []:
            cell_id = cell.get("id")
            if not cell_id:
                continue
            if self.index(notebook, cell_id) < 0 and not self._place(notebook, run, previous, cell):
                return
            if cell_id not in run.cells:
                run.cells.append(cell_id)
            self.live_cells.add(cell_id)
            previous = cell_id
        self._retry_pending(notebook)

    def _op_ops(self, notebook: Any, op: dict[str, Any]) -> None:
        for member in op.get("ops") or []:
            if isinstance(member, dict):
                self.apply(notebook, member)

    # -- take-over ops ---------------------------------------------------------------
    def _op_get_cells(self, notebook: Any, op: dict[str, Any]) -> dict[str, Any]:
        cells = notebook.get(deduplicate=False)["cells"] if hasattr(notebook, "get") else []
        return {"op": "cells", "request_id": op.get("request_id"), "cells": cells}

    def _op_cell_metadata(self, notebook: Any, op: dict[str, Any]) -> None:
        patch = op.get("rlm")
        if not isinstance(patch, dict):
            return
        for cell_id in _cell_ids(op):
            ycell = self.cell(notebook, cell_id)
            if ycell is not None:
                ycell["metadata"]["rlm"] = {**(ycell["metadata"].get("rlm") or {}), **patch}

    def _op_cell_source(self, notebook: Any, op: dict[str, Any]) -> None:
        for cell_id in _cell_ids(op):
            self._set_source(notebook, cell_id, _text(op.get("source")))
            ycell = self.cell(notebook, cell_id)
            if ycell is not None and isinstance(op.get("metadata"), dict):
                ycell["metadata"]["rlm"] = {**(ycell["metadata"].get("rlm") or {}), **op["metadata"]}

    def _op_delete_cells(self, notebook: Any, op: dict[str, Any]) -> None:
        for cell_id in _cell_ids(op):
            self._delete(notebook, cell_id)

    def _op_move_cells(self, notebook: Any, op: dict[str, Any]) -> None:
        """Move the cells, in order, to right after ``after_cell_id``."""
        after = op.get("after_cell_id")
        for cell_id in _cell_ids(op):
            source, target = self.index(notebook, cell_id), self.index(notebook, after)
            if source < 0 or target < 0 or source == target:
                continue
            value = notebook.ycells[source].to_py()
            value.pop("execution_state", None)
            del notebook.ycells[source]
            target = self.index(notebook, after)
            notebook.ycells.insert(target + 1, notebook.create_ycell(value))
            self._where.clear()
            after = cell_id

    # -- outputs -------------------------------------------------------------------------
    def route(self, notebook: Any, msg_type: str, parent_msg_id: str, content: dict[str, Any]) -> None:
        """One iopub message whose parent is a run's cell (or a ``%%rlm``
        cell's request): into that cell."""
        if msg_type == "status":
            self._anchor_status(notebook, parent_msg_id, content)
            return
        cell_id = self._target(parent_msg_id)
        ycell = self.cell(notebook, cell_id)
        if cell_id is None or ycell is None or ycell.get("cell_type") != "code":
            return
        if msg_type == "execute_input":
            _set(ycell, "execution_state", "running")
        elif msg_type == "update_display_data":
            self.outputs.update(lambda other: self.cell(notebook, other), content)
        else:
            self.outputs.add(cell_id, ycell, msg_type, content)

    def _anchor_status(self, notebook: Any, request_msg_id: str, content: dict[str, Any]) -> None:
        """A ``%%rlm`` cell's request ended: no more routing into it."""
        anchor = self.anchors.get(request_msg_id)
        if anchor is None or content.get("execution_state") != "idle":
            return
        del self.anchors[request_msg_id]
        self.routes = {m: c for m, c in self.routes.items() if c != anchor.cell_id}
        self.outputs.forget(anchor.cell_id)


def _set(ymap: Any, key: str, value: Any) -> None:
    """Set a key only when it changes: a page that sets the same key at the
    same moment (its own reply's count) makes the two writes concurrent,
    which JupyterLab 4.6 reports as an error on the pages that get both."""
    if ymap.get(key) != value:
        ymap[key] = value


def _text(source: Any) -> str:
    if source is None:
        return ""
    return "".join(source) if isinstance(source, list) else str(source)


def _cell_ids(op: dict[str, Any]) -> list[str]:
    ids = op.get("cell_ids")
    if isinstance(ids, list):
        return [i for i in ids if isinstance(i, str)]
    return [op["cell_id"]] if isinstance(op.get("cell_id"), str) and op["cell_id"] else []


__all__ = ["ORIGIN", "NotebookWriter"]
