"""A cell's traceback ends at the cell's own line when the error came from
one of our helpers (``llm_query`` interrupted, a sub-call that failed, a
budget used up): IPython hides frames marked ``__tracebackhide__`` but
always shows the last one, which would be ours. Other errors keep their
whole traceback, ours included (a bug of ours must stay visible)."""

from __future__ import annotations

import os
import types
from typing import Any

from ...errors import RLMError

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
HELPER_ERRORS = (KeyboardInterrupt, RLMError)


def _ours(entry: types.TracebackType) -> bool:
    return os.path.abspath(entry.tb_frame.f_code.co_filename).startswith(_PACKAGE)


def trim(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the trailing entries in rlm_kernel's own files, when
    some entry before them is not ours (the caller's code)."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    end = len(entries)
    while end and _ours(entries[end - 1]):
        end -= 1
    if end in (0, len(entries)):
        return entries[0] if entries else None
    trimmed = None
    for entry in reversed(entries[:end]):
        trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def install(shell: Any) -> None:
    """Show helper errors in ``shell``'s cells with the trimmed traceback."""

    def show(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> None:
        shell.showtraceback((etype, value, trim(tb)), tb_offset=tb_offset)

    shell.set_custom_exc(HELPER_ERRORS, show)
