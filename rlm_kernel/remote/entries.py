"""The run's entries and namespace as the engine sees them, when they live
in another kernel (a sandbox's or a gateway's): ``RemoteEntries`` asks the
inside's ``Entries`` (the same class as here) over user expressions;
``RemoteNamespace`` reads the other namespace as plain data (JSON) or text."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..engine.execution.namespace import HELPER_NAMES, Entries, Final, Installs

if TYPE_CHECKING:
    from .executor import RemoteExecutor

SUBCALLS = tuple(n for n in HELPER_NAMES if n.endswith("query") or n.endswith("batched"))
AFTER = "__rlm_sandbox__.after()"  # read with every cell: the step's answer and what a restore would put back


def decode(encoded: Any) -> Any:
    if not isinstance(encoded, dict):
        return None
    return encoded["json"] if "json" in encoded else str(encoded.get("text", ""))


def _final(found: Any) -> Final | None:
    return None if not found else (found[0], decode(found[1]))


class RemoteEntries(Entries):
    """The run's entries, kept by the same class in the other kernel; this
    side asks it over the wire. ``values()`` stays here: the helpers the
    inside's stand-ins call out to."""

    def __init__(self, installs: Installs, executor: RemoteExecutor) -> None:
        super().__init__(executor, installs)
        self.executor = executor
        self.booted = False
        self.check: list[Any] | None = None  # the answer dict's state after the last cell

    def boot(self) -> None:
        if self.booted:
            return
        values = self.values()
        setup: dict[str, Any] = {
            "helpers": [n for n in SUBCALLS if n in values], "tools": list(self.installs.tools()),
            "history": self.installs.continued, "prelude": self.installs.rerun,
            "cpu_seconds": self.executor.spec.cpu_seconds, "context_file": None,
        }
        if self.executor.context_inside:
            setup["context_inside"] = True  # the person's own `context`, in the other namespace already
        elif "context" in values:
            setup["context_file"] = self.executor.hand_over("context", values["context"], self.installs.sources)
        self.booted = True
        self.executor.silent(f"__rlm_sandbox__.setup({json.dumps(setup)!r})")

    def restore(self) -> list[str]:
        self.boot()
        executor = self.executor
        if executor.announced is not None:  # the last cell's report said it; the inside does it before the next cell
            names, executor.announced = executor.announced, []
            return names
        if executor.restored_last:  # nothing ran since the last restore: nothing to put back
            return []
        names = list(executor.call("restore"))
        executor.restored_last = True
        return names

    def check_answer(self) -> tuple[Final | None, str | None]:
        self.boot()
        check, self.check = self.check, None
        if check is None:
            check = self.executor.call("check_answer")
        return _final(check[0]), check[1]

    def resolve(self, kind: str, value: str, quoted: bool = False, call: str = "") -> tuple[Final | None, str | None]:
        self.boot()
        found, note = self.executor.call("resolve", kind, value, quoted, call)
        return _final(found), note

    def forget(self) -> None:
        super().forget()
        if self.booted:
            self.executor.call("forget")

    def _variables(self) -> list[str]:
        self.boot()
        return list(self.executor.call("variables"))

    def after(self, report: dict[str, Any]) -> None:
        given = _final(report.get("given"))
        if given is not None:
            self.given = given
        self.check = report.get("check")
        restore = report.get("restore")
        self.executor.announced = list(restore) if restore is not None else None


class Held:
    """A value that stays in the other kernel (a person's ``context`` there),
    as a run here sees it: what the root model is told of it, computed there
    by the same ``describe_context`` (which reads ``rlm_description``)."""

    def __init__(self, name: str, description: str) -> None:
        self.name, self.rlm_description = name, description

    def __repr__(self) -> str:
        return f"<{self.name} held in the other kernel>"


class RemoteNamespace(Mapping[str, Any]):
    """The other kernel's namespace as the engine reads it: names, and values as
    plain data (JSON) or their text."""

    def __init__(self, executor: RemoteExecutor) -> None:
        self.executor = executor

    def __getitem__(self, name: str) -> Any:
        encoded = self.executor.call("get", name)
        if encoded is None:
            raise KeyError(name)
        return decode(encoded)

    def __contains__(self, name: object) -> bool:  # without fetching the value (a context may be huge)
        return bool(self.executor.call("has", name))

    def held(self, name: str, sources: list[str] | None = None) -> Held:
        """``name`` as a run's context that stays there: its description only."""
        description = self.executor.call("describe", name, sources)
        if description is None:
            raise KeyError(name)
        return Held(name, description)

    def __iter__(self) -> Iterator[str]:
        return iter(self.executor.call("names"))

    def __len__(self) -> int:
        return len(self.executor.call("names"))


__all__ = ["AFTER", "SUBCALLS", "Held", "RemoteEntries", "RemoteNamespace", "decode"]
