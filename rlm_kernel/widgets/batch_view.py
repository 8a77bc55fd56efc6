"""The rows of a batch: one widget drawn by the labextension as a windowed,
filterable list (labextension/src/subcall_list.ts).

The kernel keeps the records; the page keeps a compact row per call. The
rows travel once in the widget's state (when it opens, when a reloaded page
asks for it), then only the rows that changed, as custom messages at most a
few times a second. The page draws the rows in view, so a batch of 5,000
costs a few dozen elements. A row's edit action comes back as a custom
message and opens the kernel-side editor on that call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w
from traitlets import Bool, Dict, Int, Unicode

from .rows import RowMaker, thumbnails
from .text_fold import Shared, shared_parts

if TYPE_CHECKING:
    from ..engine.trajectory.records import SubcallRecord

MODULE = "rlm-kernel"  # the labextension that registers the list's model and view
MODULE_VERSION = "^0.1.0"  # must accept labextension/package.json's version


class SubcallList(w.DOMWidget):
    """The rows of one batch (see the module's docstring)."""

    _model_name = Unicode("SubcallListModel").tag(sync=True)
    _model_module = Unicode(MODULE).tag(sync=True)
    _model_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    _view_name = Unicode("SubcallListView").tag(sync=True)
    _view_module = Unicode(MODULE).tag(sync=True)
    _view_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    prompts = Int(0).tag(sync=True)  # how many prompts share the shared folds
    shared_head = Unicode("").tag(sync=True)  # the text of the folded shared head (clipped)
    shared_tail = Unicode("").tag(sync=True)
    editable = Bool(False).tag(sync=True)  # rows have an edit action
    editing = Int(-1).tag(sync=True)  # the row whose editor is open
    thumbs = Dict({}).tag(sync=True)  # the calls' images as small data URLs, each once, by hash (rows name them)

    def __init__(self, records: list[SubcallRecord], on_edit: Callable[[int], None] | None = None,
                 **kwargs: Any) -> None:
        # set before the widget opens: opening sends get_state(), rows included
        self._records = records
        self._lock = threading.Lock()
        self._dirty: set[int] = set()
        self._index = {r.id: i for i, r in enumerate(records)}
        shared = shared_parts([r.prompt for r in records])
        self._rows = RowMaker(shared, len(records))
        head, tail = self._rows.shared_text(records[0].prompt) if records else ("", "")
        super().__init__(prompts=shared.prompts, shared_head=head, shared_tail=tail,
                         editable=on_edit is not None, thumbs=thumbnails(records), **kwargs)
        self._on_edit = on_edit
        self.on_msg(self._message)

    @property
    def shared(self) -> Shared:
        return self._rows.shared

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The full state carries every row (a page that opens or reloads the
        widget gets them all); a single trait's change does not."""
        state = super().get_state(key, drop_defaults)
        if key is None:
            state["rows"] = [self._rows.row(r) for r in self._records]
        return state

    def mark(self, record: SubcallRecord) -> None:
        """Note that ``record`` changed (any thread); :meth:`flush` sends it."""
        index = self._index.get(record.id)
        if index is not None:
            with self._lock:
                self._dirty.add(index)

    def flush(self) -> None:
        """Send the rows that changed since the last flush (on the kernel's main thread)."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if dirty:
            self.send({"type": "rows", "rows": [[i, self._rows.row(self._records[i])] for i in sorted(dirty)]})

    def _message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if content.get("type") == "edit" and self._on_edit is not None:
            index = content.get("index")
            if isinstance(index, int) and 0 <= index < len(self._records):
                self._on_edit(index)


__all__ = ["MODULE", "MODULE_VERSION", "SubcallList"]
