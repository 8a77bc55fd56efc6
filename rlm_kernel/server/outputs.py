"""A run's iopub messages as the outputs of its cells in a shared notebook
(jupyter_ydoc's ``YNotebook``): what a page's output area does for its own
execute request, done once, on the server, for every cell of the run.

Stream text is merged into the cell's last output of the same stream, as
JupyterLab's output model merges it, carriage returns and backspaces
settled; a display keeps its place so its ``update_display_data`` lands
there; ``clear_output(wait=True)`` clears on the next output.
"""

from __future__ import annotations

import re
from typing import Any

_CR_NEWLINE = re.compile(r"\r+\n")


def settle(text: str) -> str:
    """Stream text as a terminal shows it: a carriage return goes back to the
    start of its line (what follows overwrites), a backspace removes the
    character before it. A trailing carriage return stays, so that the next
    piece overwrites the line."""
    if "\r" not in text and "\b" not in text:
        return text
    lines = []
    for line in _CR_NEWLINE.sub("\n", text).split("\n"):
        if "\b" in line:
            kept: list[str] = []
            for char in line:
                if char == "\b":
                    if kept:
                        kept.pop()
                else:
                    kept.append(char)
            line = "".join(kept)
        if "\r" in line:
            parts = line.split("\r")
            shown = ""
            for part in parts:
                shown = part + shown[len(part):]
            line = shown + ("\r" if parts[-1] == "" else "")
        lines.append(line)
    return "\n".join(lines)


def as_output(msg_type: str, content: dict[str, Any]) -> dict[str, Any] | None:
    """The nbformat output an iopub message adds, else None."""
    if msg_type == "stream":
        return {"output_type": "stream", "name": content.get("name", "stdout"), "text": content.get("text", "")}
    if msg_type == "display_data":
        return {"output_type": "display_data", "data": content.get("data", {}),
                "metadata": content.get("metadata", {})}
    if msg_type == "execute_result":
        return {"output_type": "execute_result", "data": content.get("data", {}),
                "metadata": content.get("metadata", {}), "execution_count": content.get("execution_count")}
    if msg_type == "error":
        return {"output_type": "error", "ename": content.get("ename", ""), "evalue": content.get("evalue", ""),
                "traceback": content.get("traceback", [])}
    return None


def display_id_of(content: dict[str, Any]) -> str | None:
    transient = content.get("transient")
    display_id = transient.get("display_id") if isinstance(transient, dict) else None
    return display_id if isinstance(display_id, str) and display_id else None


class CellOutputs:
    """Writes outputs into the Y cells of one shared notebook; remembers
    where displays sit and which cells wait to be cleared. Call inside a
    transaction of the notebook's document."""

    def __init__(self) -> None:
        self.displays: dict[str, list[tuple[str, int]]] = {}  # display id -> (cell id, output index)
        self.clear_pending: set[str] = set()

    def add(self, cell_id: str, ycell: Any, msg_type: str, content: dict[str, Any]) -> None:
        """One iopub message of a routed cell (the output kinds and clear_output)."""
        if msg_type == "clear_output":
            if content.get("wait"):
                self.clear_pending.add(cell_id)
            else:
                self.clear(cell_id, ycell)
            return
        output = as_output(msg_type, content)
        if output is None:
            return
        youtputs = ycell["outputs"]
        if cell_id in self.clear_pending:
            self.clear(cell_id, ycell)
        if output["output_type"] == "stream" and len(youtputs):
            last = youtputs[len(youtputs) - 1]
            if last.get("output_type") == "stream" and last.get("name") == output["name"]:
                self._append_text(last, output["text"])
                return
        if output["output_type"] == "stream":
            output["text"] = settle(output["text"])
        youtputs.append(youtput(output))
        display_id = display_id_of(content)
        if display_id:
            self.displays.setdefault(display_id, []).append((cell_id, len(youtputs) - 1))

    def update(self, find: Any, content: dict[str, Any]) -> None:
        """``update_display_data``: every place that display sits (``find``:
        cell id -> its Y cell, or None when it is gone).

        A page applies an output inserted by another client at the end of
        its outputs, wherever it was inserted (JupyterLab 4.6's code cell
        model); so a display is changed by replacing it and every output
        after it, which the page then appends again, in order."""
        output = {"output_type": "display_data", "data": content.get("data", {}),
                  "metadata": content.get("metadata", {})}
        for cell_id, index in self.displays.get(display_id_of(content) or "", []):
            ycell = find(cell_id)
            if ycell is None or index >= len(ycell["outputs"]):
                continue
            youtputs = ycell["outputs"]
            after = [youtputs[i].to_py() for i in range(index + 1, len(youtputs))]
            del youtputs[index:len(youtputs)]
            youtputs.extend([youtput(output), *(youtput(o) for o in after)])

    def clear(self, cell_id: str, ycell: Any) -> None:
        self.clear_pending.discard(cell_id)
        youtputs = ycell["outputs"]
        if len(youtputs):
            del youtputs[0:len(youtputs)]
        self.forget(cell_id)

    def forget(self, cell_id: str) -> None:
        for display_id in list(self.displays):
            kept = [slot for slot in self.displays[display_id] if slot[0] != cell_id]
            if kept:
                self.displays[display_id] = kept
            else:
                del self.displays[display_id]

    @staticmethod
    def _append_text(youtput: Any, text: str) -> None:
        ytext = youtput.get("text")
        if not hasattr(ytext, "insert"):  # a plain string (not how outputs are made here): replace it
            youtput["text"] = settle(str(ytext or "") + text)
            return
        old = str(ytext)
        if "\r" not in text and "\b" not in text and not old.endswith("\r"):
            ytext.insert(len(old), text)
            return
        new = settle(old + text)
        same = 0  # keep the text both share, change only the rest
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        if same < len(old):
            del ytext[same:len(old)]
        if same < len(new):
            ytext.insert(same, new[same:])


def youtput(output: dict[str, Any]) -> Any:
    """One output as the shared model keeps it, as JupyterLab makes it: a
    map of its fields, a stream's text a shared text (so it can grow)."""
    from pycrdt import Map, Text

    if output.get("output_type") == "stream":
        text = output.get("text", "")
        return Map({**output, "text": Text("".join(text) if isinstance(text, list) else text)})
    return Map(output)


__all__ = ["CellOutputs", "as_output", "display_id_of", "settle", "youtput"]
