"""What a run puts into the namespace its code runs in: ``context``, the
sub-call helpers, ``SHOW_VARS``, ``FINAL`` / ``FINAL_VAR`` and the ``answer``
dict; putting the helpers back when the code rebinds or deletes them; and
reading an answer from the namespace.

``answer`` is the model's once it rebinds it to anything but an answer dict
(a dict with no keys but ``content`` and ``ready``): it is never restored or
read as the dict after that, and the model is told once."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import AnswerError

HELPER_NAMES = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "SHOW_VARS", "FINAL", "FINAL_VAR")
_MISSING = object()
Final = tuple[str | None, Any]  # (the variable that holds the answer, the answer)


def is_answer_dict(value: Any) -> bool:
    """A dict the ``answer`` protocol reads: no keys but ``content`` and ``ready``."""
    return isinstance(value, dict) and bool(value) and set(value) <= {"content", "ready"}


@dataclass
class Installs:
    """What a run installs in its namespace, as its :class:`Entries` read it."""

    helpers: Any  # llm_query, llm_query_batched, rlm_query, rlm_query_batched as attributes
    context: Callable[[], Any]  # the run's context now; None: a resumed run's re-run cells define it
    tools: Callable[[], dict[str, Any]] = dict  # a person's tools, by name (found late on a resume)
    continued: bool = False  # the run goes on from a history: the model's own `answer` stays its own
    rerun: bool = False  # the run re-runs recorded cells first
    sources: list[str] | None = field(default=None)  # the files the context was loaded from


class Entries:
    """The names a run installs, built once: bound methods are new objects on
    every access, and the restore check compares identities. ``where`` is the
    executor (its ``namespace``, and its ``shell`` when it has one)."""

    def __init__(self, where: Any, installs: Installs) -> None:
        self.where = where
        self.installs = installs
        self.answer: dict[str, Any] = {"content": "", "ready": False}
        self.given: Final | None = None  # (variable, value) once FINAL / FINAL_VAR ran
        self.answer_off = False  # the code made `answer` its own variable
        self._installed = False
        self._values: dict[str, Any] | None = None

    def values(self) -> dict[str, Any]:
        if self._values is None:
            installs = self.installs
            helpers = installs.helpers
            context = installs.context()
            values = {
                "context": context,
                "llm_query": helpers.llm_query,
                "llm_query_batched": helpers.llm_query_batched,
                "rlm_query": helpers.rlm_query,
                "rlm_query_batched": helpers.rlm_query_batched,
                "SHOW_VARS": self.show_vars,
                "FINAL": self.final,
                "FINAL_VAR": self.final_var,
                "answer": self.answer,
                **installs.tools(),
            }
            if context is None and installs.rerun:
                del values["context"]  # a resumed run's own cells define it
            self._values = values
        return self._values

    def forget(self) -> None:
        """Build the entries again at the next restore (the context changed)."""
        self._values = None

    def restore(self) -> list[str]:
        """Put back any helper or ``context`` the code rebound or deleted;
        return their names (none on the first call, which installs them and
        the answer dict). ``answer`` is never put back."""
        namespace = self.where.namespace
        first, self._installed = not self._installed, True
        current = namespace.get("answer", _MISSING)
        if first and self.installs.continued and current is not _MISSING and not is_answer_dict(current):
            self.answer_off = True  # a continued run: the model's own `answer` stays
        restored = []
        for name, value in self.values().items():
            if name == "answer" and (not first or self.answer_off):
                continue
            if namespace.get(name, _MISSING) is not value:
                namespace[name] = value
                restored.append(name)
        return [] if first else restored

    def check_answer(self) -> tuple[Final | None, str | None]:
        """After a cell: the answer the ``answer`` dict gives (ready), and a
        note for the model the first time its code turned the dict off."""
        current = self.where.namespace.get("answer", _MISSING)
        if current is self.answer or is_answer_dict(current):
            self.answer, self.answer_off = current, False
            return ((None, current.get("content")) if current.get("ready") else None), None
        if self.answer_off:
            return None, None
        self.answer_off = True
        what = "deleted `answer`" if current is _MISSING else f"rebound `answer` (it is now a {type(current).__name__})"
        return None, (f"Note: your code {what}, so it is your own variable and the answer dict is off: "
                      "end with FINAL(...) or FINAL_VAR(...).")

    def resolve(self, kind: str, value: str, quoted: bool = False, call: str = "") -> tuple[Final | None, str | None]:
        """The answer a FINAL / FINAL_VAR call in prose gives, or why it gives none."""
        namespace = self.where.namespace
        call = call or f"{'FINAL_VAR' if kind == 'var' else 'FINAL'}({value})"
        if kind == "text":
            if not quoted and value in (*self._variables(), "context", "answer") and value in namespace:
                if value == "answer" and namespace[value] is self.answer and not self.answer_off:
                    return None, self._dict_note(call)
                return None, (f"{call} was not taken: `{value}` is also one of your variables. Write "
                              f"FINAL_VAR({value}) to answer with its value, or FINAL(\"{value}\") for the word itself.")
            return (None, value), None
        if not value.isidentifier():
            return None, (f"{call} was not taken: FINAL_VAR takes the name of a variable, and {value!r} is not one. "
                          "Assign the value to a variable first, or use FINAL(...).")
        if value not in namespace:
            return None, (f"{call} was not taken: there is no variable named {value!r}{self._yours()}. "
                          "Create it in code first, or answer with FINAL(...).")
        if namespace[value] is self.answer and not self.answer_off:
            return None, self._dict_note(call)
        return (value, namespace[value]), None

    def _dict_note(self, call: str) -> str:
        return (f"{call} was not taken: `answer` is still the answer dict. To answer with it, set "
                "answer[\"content\"] = ... and answer[\"ready\"] = True in code.")

    def _yours(self) -> str:
        names = self._variables()
        if not names:
            return " (you have made no variables yet)"
        return f" (your variables: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})"

    def _variables(self) -> list[str]:
        """The names of the variables the code (or a person) made."""
        skip = set(self.values()) - ({"answer"} if self.answer_off else set())
        shell = getattr(self.where, "shell", None)
        hidden = getattr(shell, "user_ns_hidden", None) or {}  # IPython's own: In, Out, exit, open...
        found = []
        for name, value in list(self.where.namespace.items()):
            if name.startswith("_") or name in skip or type(value).__name__ == "module":
                continue
            if hidden.get(name, _MISSING) is value or getattr(builtins, name, _MISSING) is value:
                continue
            found.append(name)
        return found

    def show_vars(self) -> None:
        """``SHOW_VARS()``: the variables the code made, with type and size."""
        namespace = self.where.namespace
        rows = []
        for name in self._variables():
            value = namespace[name]
            size = len(value) if hasattr(value, "__len__") and not isinstance(value, type) else None
            rows.append(f"{name}: {type(value).__name__}" + (f" (len {size:,})" if size is not None else ""))
        print("\n".join(rows) if rows else "(no variables yet)")

    def final(self, value: Any = None) -> None:
        """``FINAL(value)`` called in code."""
        __tracebackhide__ = True
        if value is self.answer and not self.answer_off:
            raise AnswerError(self._dict_note("FINAL(answer)"))
        self.given = (None, value)

    def final_var(self, name: Any) -> None:
        """``FINAL_VAR(name)`` called in code: the variable named ``name``; a
        value that cannot be a name (not a str, or not an identifier) is the answer."""
        __tracebackhide__ = True
        if isinstance(name, str) and name.strip().isidentifier():
            name = name.strip()
            namespace = self.where.namespace
            if name not in namespace:
                raise AnswerError(f"FINAL_VAR({name!r}) gave no answer: there is no variable named {name!r}"
                                  f"{self._yours()}. FINAL_VAR takes a variable's name in quotes, "
                                  "FINAL_VAR('result'); to answer with a value, use FINAL(value).")
            if namespace[name] is self.answer and not self.answer_off:
                raise AnswerError(self._dict_note(f"FINAL_VAR({name!r})"))
            self.given = (name, namespace[name])
        else:
            if name is self.answer and not self.answer_off:
                raise AnswerError(self._dict_note("FINAL_VAR(answer)"))
            self.given = (None, name)


__all__ = ["Entries", "Final", "HELPER_NAMES", "Installs", "is_answer_dict"]
