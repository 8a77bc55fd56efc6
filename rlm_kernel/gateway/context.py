"""A run's context in a gateway's kernel.

Two ways in. Paths given with ``--executor gateway`` (``rlm-kernel run
--context``, ``Path`` objects or :class:`Paths` given to ``RLM.completion``)
are read where the kernel runs, by the same loader (``context.files``);
this side holds a :class:`HeldThere` that carries what the root model is
told, computed there by the same ``describe_context``. A context given
from here (text, a list, loaded documents) is sent in chunks
(``shipping.py``). A kernel that started again after a death reads its
paths again.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from ..errors import ContextError


class Paths(list):  # type: ignore[type-arg]
    """Paths (files, folders, globs, URLs) read where the gateway's kernel runs."""

    def __init__(self, paths: Sequence[str], encoding: str = "utf-8") -> None:
        super().__init__(str(p) for p in paths)
        self.encoding = encoding


class HeldThere:
    """The context as this side sees it when the gateway's kernel loaded it:
    what the root model is told of it (``rlm_description``), its sources."""

    def __init__(self, paths: Paths, description: str, sources: list[str]) -> None:
        self.paths, self.rlm_description, self.sources = paths, description, sources
        self.kernel: Any = None  # the kernel that holds it now

    def __repr__(self) -> str:
        return f"<context held in the gateway's kernel, loaded from {', '.join(self.sources[:3])}>"


def read_there(paths: Sequence[str], encoding: str = "utf-8") -> SimpleNamespace:
    """``--context`` paths for a gateway's kernel, as a load here gives them (``value``, ``sources``):
    read there once the kernel has started."""
    return SimpleNamespace(value=Paths(paths, encoding), sources=list(paths))


def load_there(executor: Any, paths: Paths) -> HeldThere:
    """Start the gateway's kernel and load ``paths`` there; one sentence when it cannot."""
    executor.start()
    said = executor.call("load", "context", list(paths), paths.encoding)
    if "error" in said:
        raise ContextError(f"The gateway's kernel could not load the context: {said['error']}")
    held = HeldThere(paths, said["description"], list(said["sources"] or paths))
    held.kernel = executor.client
    return held


class GatewayCourier:
    """How the context reaches the gateway's kernel."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor

    def bind(self, sources: list[str] | None) -> None:
        pass  # nothing to bind: paths are read there or the value is sent

    def hand_over(self, name: str, value: Any, sources: list[str] | None) -> str | None:
        if isinstance(value, HeldThere):
            executor = self.executor
            if value.kernel is not executor.client:  # a new kernel (after a death, or a child's): read it again
                said = executor.call("load", name, list(value.paths), value.paths.encoding)
                if "error" in said:
                    raise ContextError(f"The gateway's kernel could not load the context: {said['error']}")
                value.kernel = executor.client
            return None
        return self.context_file(value)

    def context_file(self, value: Any) -> str:
        """``value`` pickled into a file there, in chunks; its path there."""
        from .shipping import CHUNK_BYTES, Progress, chunks, pickled

        executor = self.executor
        data = pickled(value)
        cells = chunks(data)
        progress = Progress(len(data))
        try:
            path = executor.silent(cells[0], {"path": "_rlm_file"})["user_expressions"]["path"]
            for index, cell in enumerate(cells[1:]):
                executor.silent(cell)
                progress.update(min(CHUNK_BYTES, len(data) - index * CHUNK_BYTES))
        finally:
            progress.close()
        executor.silent("del _rlm_file")
        return str(ast.literal_eval(path["data"]["text/plain"]))  # the repr of the str the kernel made


__all__ = ["GatewayCourier", "HeldThere", "Paths", "load_there", "read_there"]
