"""The editor of one sub-call: its prompt, its response, "Ask the model"
(sends the prompt as it is in the editor to the sub-model now and puts the
answer in the response box) and "Pin response" (re-running the cell returns
it instead of a model call).

A long prompt is shown folded: the call's own part with a little of the
shared text around it. The text box holds only what is the call's own (the
shared parts stay as they are), and only when that is short enough; a
longer one goes into a text box when the person asks for it.
"""

from __future__ import annotations

import concurrent.futures
import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from .rows import shown_status
from .text_fold import FOLD_FROM, Shared, fold, fold_html

if TYPE_CHECKING:
    from ..engine.trajectory.records import SubcallRecord

EDIT_CHARS = 20_000  # the longest prompt part put in a text box without being asked


class SubcallEditor:
    """Edits one call at a time; :attr:`box` is empty until :meth:`open`."""

    def __init__(self, pinner: Callable[[SubcallRecord, str, str | None], None],
                 asker: Callable[[SubcallRecord, str], concurrent.futures.Future[Any]] | None,
                 changed: Callable[[SubcallRecord | None], None]) -> None:
        self.pinner = pinner  # (record, response, prompt)
        self.asker = asker  # (record, prompt) -> future of a completion
        self.changed = changed  # the record was pinned (None: the editor closed)
        self.box = w.VBox([], layout=w.Layout(width="100%"))
        self.box.add_class("rlm-sc-editor")
        self.record: SubcallRecord | None = None
        self._prompt: Any = None  # the text box of the prompt's editable part, once there is one
        self._around = ("", "")  # the prompt's text before and after that part

    def open(self, record: SubcallRecord, number: int | None = None, total: int = 1,
             shared: Shared | None = None) -> None:
        """Show ``record`` (the ``number``-th call of ``total``) in the editor."""
        if record is self.record and self.box.children:
            return
        self._clear()
        self.record = record
        edited = record.edited_prompt
        prompt = edited if edited is not None else record.prompt
        head, tail = (shared or Shared()).bounds(prompt, record.prompt) if len(prompt) > FOLD_FROM else (0, 0)
        own = prompt[head:len(prompt) - tail]
        self._around = (prompt[:head], prompt[len(prompt) - tail:])

        which = f"sub-call #{number:,} of {total:,}" if number is not None and total > 1 else "sub-call"
        title = (f"<div class='rlm-sc-edit-title'><b>Editing {which}</b> · {shown_status(record)} · "
                 f"<code>{html.escape(record.model)}</code></div>")
        said = f"{len(prompt):,} characters" + (", edited by a person" if edited is not None else "")
        children: list[Any] = [w.HTML(title), w.HTML(f"<b>Prompt</b> ({said})")]
        if len(prompt) > FOLD_FROM:
            folded = fold_html(prompt, fold(prompt, head, tail), (shared or Shared()).prompts)
            children.append(w.HTML(f"<div class='rlm-sc-folded-prompt'>{folded}</div>",
                                   _dom_classes=("rlm-sc-edit-prompt-view",)))
        if head or tail:
            children.append(w.HTML(f"<i>This call's own part ({len(own):,} characters). The {head:,} characters "
                                   f"before it and the {tail:,} after it are shared with the batch and stay as "
                                   "they are.</i>"))
        if len(own) <= EDIT_CHARS:
            children.append(self._prompt_box(own))
        else:
            load = w.Button(description=f"Edit all {len(own):,} characters in a text box", icon="pencil",
                            layout=w.Layout(width="auto", align_self="flex-start"),
                            _dom_classes=("rlm-sc-edit-prompt-open",))
            load.on_click(lambda _: self._load_prompt(load, own))
            children.append(load)
        self._text = w.Textarea(value=record.response or "", layout=w.Layout(width="95%", height="8em"),
                                _dom_classes=("rlm-sc-edit-text",))
        self._pin_button = w.Button(description="Pin response", icon="thumb-tack", button_style="warning",
                                    tooltip="Keep this response (and your prompt): re-running the cell returns it "
                                            "instead of a model call", _dom_classes=("rlm-sc-pin",))
        self._pin_button.on_click(lambda _: self._pin())
        close = w.Button(description="Close", icon="times", tooltip="Close the editor",
                         _dom_classes=("rlm-sc-edit-close",))
        close.on_click(lambda _: self.close())
        self._note = w.HTML()
        buttons = [self._pin_button, close]
        if self.asker is not None:
            self._ask_button = w.Button(description="Ask the model", icon="paper-plane",
                                        tooltip="Send the prompt above to the sub-model now; its answer fills the "
                                                "response box (pin it to keep it)", _dom_classes=("rlm-sc-ask",))
            self._ask_button.on_click(lambda _: self._ask())
            buttons.insert(0, self._ask_button)
        children += [w.HTML("<b>Response</b>"), self._text, w.HBox([*buttons, self._note])]
        self.box.children = children

    def close(self) -> None:
        self._clear()
        self.changed(None)

    def _clear(self) -> None:
        old, self.box.children = self.box.children, ()
        for child in old:
            for inner in getattr(child, "children", ()):
                inner.close()
            child.close()
        self.record, self._prompt = None, None

    def _prompt_box(self, text: str) -> Any:
        # classes given at creation travel in the widget's first message
        self._prompt = w.Textarea(value=text, layout=w.Layout(width="95%", height="6em"),
                                  _dom_classes=("rlm-sc-edit-prompt",))
        return self._prompt

    def _load_prompt(self, button: Any, text: str) -> None:
        box = self._prompt_box(text)
        self.box.children = tuple(box if child is button else child for child in self.box.children)
        button.close()

    def prompt(self) -> str:
        """The prompt as it is in the editor."""
        record = self.record
        assert record is not None
        if self._prompt is None:
            return record.edited_prompt if record.edited_prompt is not None else record.prompt
        return self._around[0] + self._prompt.value + self._around[1]

    def _ask(self) -> None:
        record = self.record
        if self.asker is None or record is None:
            return
        self._ask_button.disabled = True
        self._note.value = f"<span class='rlm-sc-asking'>Asking {html.escape(record.model)}…</span>"
        try:
            future = self.asker(record, self.prompt())
        except Exception as error:  # noqa: BLE001 - shown in the editor, like a failed call
            self._asked(record, None, error)
            return
        future.add_done_callback(lambda done: self._asked(record, done, None))

    def _asked(self, record: SubcallRecord, future: concurrent.futures.Future[Any] | None,
               error: BaseException | None) -> None:
        """The model's answer to an edited prompt (on the engine's thread:
        widget updates go out through the kernel's thread-safe iopub)."""
        from ..redaction import redact

        if record is not self.record:
            return  # the editor moved on to another call
        if future is not None:
            error = future.exception() if not future.cancelled() else RuntimeError("cancelled")
        self._ask_button.disabled = False
        if error is not None:
            self._note.value = (f"<span class='rlm-sc-ask-error'>The model call failed: "
                                f"{html.escape(redact(str(error)))}</span>")
            return
        assert future is not None
        self._text.value = future.result().text
        self._note.value = ("<span class='rlm-sc-answered'>The model answered your prompt: "
                            "check the response, then pin it.</span>")

    def _pin(self) -> None:
        record = self.record
        if record is None:
            return
        self.pinner(record, self._text.value, self.prompt())
        self.changed(record)
        edited = record.edited_prompt is not None
        self._note.value = (
            "<span class='rlm-sc-pinned-note'>Pinned"
            + (" with your prompt" if edited else "")
            + ": re-run the cell to use it (saved in the cell's metadata).</span>"
        )


__all__ = ["EDIT_CHARS", "SubcallEditor"]
