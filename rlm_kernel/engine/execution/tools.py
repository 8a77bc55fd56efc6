"""A person's own tools: functions offered to the root model with ``--tools``.

A tool is given as a name in the namespace (``%%rlm --tools search_index``),
as ``module:function`` (``rlm-kernel run --tools mytools:search``; any
surface), or as the function itself (``RLM(tools=[search])``). The run puts
each one into its namespace under its name (and back, if the code rebinds
it) and tells the root model its name, signature and the first paragraph of
its docstring; the code calls it like any function.

Names are looked up when the run is built, so a name that is not a function
is refused in one sentence before any model call. A resumed run whose
recorded cells define a tool looks its name up once they have run again.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import RLMError

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$|^[A-Za-z_]\w*$")
RESERVED = ("context", "answer", "llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "SHOW_VARS",
            "FINAL", "FINAL_VAR")
DOC_CHARS = 400  # of a docstring's first paragraph, told to the model


def spec_problem(text: str) -> str | None:
    """What is wrong with a tool written as text (None: nothing)."""
    if not _SPEC.match(text):
        return (f"{text!r} is neither a name (search_index) nor module:function (mytools:search)")
    return None


def spec_of(tool: Any) -> str:
    """How a tool is written in a query cell: its text, or for a function
    ``module:name`` when its module can be imported again (else its name)."""
    if isinstance(tool, str):
        return tool
    name = getattr(tool, "__name__", "")
    module = getattr(tool, "__module__", None)
    qualname = getattr(tool, "__qualname__", name)
    if module and module != "__main__" and qualname == name and not module.startswith("__"):
        return f"{module}:{name}"
    return name


def value_problem(value: Any) -> str | None:
    """What is wrong with the ``tools`` option's Python value (None: nothing)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        return f"must be a list of functions or names, got {value!r}"
    for item in value:
        if isinstance(item, str):
            problem = spec_problem(item)
            if problem:
                return f"got {problem}"
        elif not callable(item):
            return f"must be a list of functions or names, got {item!r} in it"
    return None


def parse_flag(text: str) -> list[str]:
    """``--tools a,b`` (or one ``module:function``) as a list of specs; an
    argparse ``type``, so a bad one is said in its words."""
    import argparse

    specs = [part.strip() for part in text.split(",") if part.strip()]
    if not specs:
        raise argparse.ArgumentTypeError(f"expected tool names, got {text!r}")
    for spec in specs:
        problem = spec_problem(spec)
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return specs


@dataclass(frozen=True)
class Tool:
    name: str  # in the namespace
    function: Callable[..., Any]
    spec: str  # as given (a name, module:function, or the function's own spec)

    def describe(self) -> str:
        """One line for the root model: the call, and what the docstring's first paragraph says."""
        signature = "(...)"
        for strings in (True, False):  # annotations as written, not as `from __future__` strings
            try:
                signature = str(inspect.signature(self.function, eval_str=strings))
                break
            except Exception:  # noqa: BLE001, S112 - an annotation that does not evaluate; a builtin
                continue
        doc = first_paragraph(inspect.getdoc(self.function) or "")
        return f"- `{self.name}{signature}`" + (f": {doc}" if doc else " (no docstring)")


def first_paragraph(doc: str) -> str:
    paragraph = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    return text if len(text) <= DOC_CHARS else text[:DOC_CHARS - 3].rstrip() + "..."


class Toolbox:
    """The tools of one run: found from their specs, installed in its namespace."""

    def __init__(self, specs: Iterable[Any] | None = None) -> None:
        self.specs: tuple[Any, ...] = tuple(specs or ())
        self.tools: list[Tool] = []
        self.waiting: list[str] = []  # names a resumed run's recorded cells are to define

    def __bool__(self) -> bool:
        return bool(self.specs)

    def bind(self, namespace: Mapping[str, Any], *, later: bool = False) -> None:
        """Find every tool (``later``: a name not in ``namespace`` yet waits
        for :meth:`bind_waiting`). Raises :class:`RLMError` in one sentence."""
        tools: list[Tool] = []
        waiting: list[str] = []
        for spec in self.specs:
            if isinstance(spec, str) and ":" not in spec and spec not in namespace and later:
                waiting.append(spec)
                continue
            tools.append(find(spec, namespace))
        self.tools, self.waiting = tools, waiting
        self._check_names()

    def bind_waiting(self, namespace: Mapping[str, Any]) -> bool:
        """Find the names that waited (True when there were any)."""
        if not self.waiting:
            return False
        self.tools += [find(name, namespace, resumed=True) for name in self.waiting]
        self.waiting = []
        self._check_names()
        return True

    def _check_names(self) -> None:
        seen: dict[str, str] = {}
        for tool in self.tools:
            if tool.name in RESERVED:
                raise RLMError(f"--tools: {tool.spec!r} would replace the run's own `{tool.name}`; "
                               "give the function another name.")
            if tool.name in seen and seen[tool.name] != tool.spec:
                raise RLMError(f"--tools: {seen[tool.name]!r} and {tool.spec!r} both have the name "
                               f"`{tool.name}`; give one of them another name.")
            seen[tool.name] = tool.spec

    def entries(self) -> dict[str, Any]:
        """What the run installs in its namespace."""
        return {tool.name: tool.function for tool in self.tools}

    def names(self) -> list[str]:
        return [tool.name for tool in self.tools]

    def describe(self) -> str:
        """What the root model is told about the tools ("" when there are none)."""
        if not self.tools:
            return ""
        lines = "\n".join(tool.describe() for tool in self.tools)
        return ("Tools the user gave you, already defined in the session; call them in repl code like any "
                f"function:\n{lines}")


def find(spec: Any, namespace: Mapping[str, Any], *, resumed: bool = False) -> Tool:
    """One tool from its spec, or :class:`RLMError` in one sentence."""
    if not isinstance(spec, str):
        name = getattr(spec, "__name__", "")
        if not callable(spec):
            raise RLMError(f"--tools: {spec!r} is not a function.")
        if not name.isidentifier():
            raise RLMError(f"--tools: {spec!r} has no name the code could call it by; define it with def.")
        return Tool(name, spec, spec_of(spec))
    if ":" in spec:
        return _imported(spec)
    if spec not in namespace:
        where = ("the notebook's cells did not define it when they ran again" if resumed
                 else "it is not defined in the namespace")
        raise RLMError(f"--tools: {spec!r} is not a function the run can call ({where}); define it in a cell "
                       "first, or give it as module:function.")
    value = namespace[spec]
    if not callable(value):
        raise RLMError(f"--tools: {spec!r} is a {type(value).__name__} in the namespace, not a function.")
    return Tool(spec, value, spec)


def _imported(spec: str) -> Tool:
    module_name, _, path = spec.partition(":")
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:  # like `python -m` and uvicorn: a module in the working directory can be named
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any failed import is the same one sentence
        raise RLMError(f"--tools: cannot import {module_name!r} for {spec!r} "
                       f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}).") from None
    finally:
        if added and os.getcwd() in sys.path:
            sys.path.remove(os.getcwd())
    value: Any = module
    for part in path.split("."):
        if not hasattr(value, part):
            raise RLMError(f"--tools: {module_name!r} has no {path!r} (for {spec!r}).")
        value = getattr(value, part)
    if not callable(value):
        raise RLMError(f"--tools: {spec!r} is a {type(value).__name__}, not a function.")
    return Tool(path.rpartition(".")[2], value, spec)


__all__ = ["RESERVED", "Tool", "Toolbox", "find", "first_paragraph", "parse_flag", "spec_of", "spec_problem",
           "value_problem"]
