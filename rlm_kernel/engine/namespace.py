"""What a run puts into the namespace its code runs in: ``context``, the
sub-call helpers, ``SHOW_VARS``, ``FINAL`` / ``FINAL_VAR`` and the ``answer``
dict; and putting them back when the code rebinds or deletes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import Run

HELPER_NAMES = ("llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "SHOW_VARS", "FINAL", "FINAL_VAR")
_MISSING = object()


class Entries:
    """The names a run installs, built once: bound methods are new objects on
    every access, and the restore check compares identities."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.answer: dict[str, Any] = {"content": "", "ready": False}
        self.given: tuple[str | None, Any] | None = None  # (variable, value) once FINAL / FINAL_VAR ran
        self._installed = False
        self._values: dict[str, Any] | None = None

    def values(self) -> dict[str, Any]:
        if self._values is None:
            helpers = self.run.helpers
            values = {
                "context": self.run.context,
                "llm_query": helpers.llm_query,
                "llm_query_batched": helpers.llm_query_batched,
                "rlm_query": helpers.rlm_query,
                "rlm_query_batched": helpers.rlm_query_batched,
                "SHOW_VARS": self.show_vars,
                "FINAL": self.final,
                "FINAL_VAR": self.final_var,
                "answer": self.answer,
            }
            if self.run.context is None and self.run.prelude:
                del values["context"]  # a resumed run's own cells define it
            self._values = values
        return self._values

    def forget(self) -> None:
        """Build the entries again at the next restore (the context changed)."""
        self._values = None

    def restore(self) -> list[str]:
        """Put back any helper or ``context`` the code rebound or deleted;
        return their names (none on the first call, which installs them)."""
        namespace = self.run.executor.namespace
        current = namespace.get("answer")
        if isinstance(current, dict) and current is not self.answer and current.get("ready"):
            self.answer = current  # the code rebuilt the answer dict wholesale
            self.values()["answer"] = current
        restored = []
        for name, value in self.values().items():
            if namespace.get(name, _MISSING) is not value:
                namespace[name] = value
                restored.append(name)
        first, self._installed = not self._installed, True
        return [] if first else [n for n in restored if n != "answer"]

    def show_vars(self) -> None:
        """``SHOW_VARS()``: the variables the code made, with type and size."""
        skip = set(self.values()) | {"In", "Out", "exit", "quit", "get_ipython"}
        rows = []
        for name, value in list(self.run.executor.namespace.items()):
            if name.startswith("_") or name in skip or callable(value) and getattr(value, "__module__", "") == "builtins":
                continue
            if type(value).__name__ == "module":
                continue
            size = len(value) if hasattr(value, "__len__") and not isinstance(value, type) else None
            rows.append(f"{name}: {type(value).__name__}" + (f" (len {size:,})" if size is not None else ""))
        print("\n".join(rows) if rows else "(no variables yet)")

    def final(self, value: Any = None) -> None:
        """``FINAL(value)`` called in code."""
        self.given = (None, value)

    def final_var(self, name: Any) -> None:
        """``FINAL_VAR(name)`` called in code."""
        if isinstance(name, str) and name.isidentifier():
            namespace = self.run.executor.namespace
            if name not in namespace:
                raise NameError(f"FINAL_VAR: there is no variable named {name!r}; create it first or use FINAL(value).")
            self.given = (name, namespace[name])
        else:
            self.given = (None, name)


__all__ = ["Entries", "HELPER_NAMES"]
