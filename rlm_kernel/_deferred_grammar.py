"""Startup of the processes we start: the IRI grammar is built when used.

nbformat imports jsonschema, whose format checks import ``rfc3987_syntax``,
which builds its IRI grammar (a lark parser) on import: ~1.5 s of every
process that writes a notebook (``rlm-kernel run``, a kernel's first run, a
batch worker), for an ``iri`` format check that nbformat never makes.

:func:`defer_iri_grammar` puts a stand-in for ``rfc3987_syntax`` into
``sys.modules`` first. jsonschema takes ``is_valid_syntax`` from it; that
function imports the real module on its first call, as reading any other
attribute does, so a check that is made gives the real module's answer. It
is called only at the entry points of processes we start (the CLI, the
kernels, local batch workers), never on ``import rlm_kernel``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

NAME = "rfc3987_syntax"
_lock = threading.Lock()
_real: types.ModuleType | None = None


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:  # any attribute not set here
        if name.startswith("__") and name != "__all__":
            # Tools probe every module for such names (``hasattr(m, "__warningregistry__")``):
            # that must not build the grammar.
            raise AttributeError(name)
        return getattr(real_module(), name)


def real_module() -> types.ModuleType:
    """The real ``rfc3987_syntax``, imported (and put in ``sys.modules`` in the
    stand-in's place) on the first call."""
    global _real
    with _lock:
        if _real is None:
            if isinstance(sys.modules.get(NAME), _StandIn):
                del sys.modules[NAME]
            _real = importlib.import_module(NAME)
    return _real


def _is_valid_syntax(term: str, value: str) -> bool:
    return bool(real_module().is_valid_syntax(term, value))


def defer_iri_grammar() -> None:
    """Put the stand-in in place, unless the module is loaded already or is
    not installed (jsonschema then goes without the check, as it would)."""
    spec = None if NAME in sys.modules else importlib.util.find_spec(NAME)
    if spec is None:
        return
    stand_in = _StandIn(NAME, "A stand-in that imports rfc3987_syntax when it is first used (rlm_kernel).")
    # The real module's spec, so that find_spec and importing a submodule still work.
    stand_in.__spec__, stand_in.__loader__, stand_in.__package__ = spec, spec.loader, NAME
    stand_in.__file__, stand_in.__path__ = spec.origin, list(spec.submodule_search_locations or [])
    stand_in.is_valid_syntax = _is_valid_syntax  # type: ignore[attr-defined]
    sys.modules[NAME] = stand_in


__all__ = ["NAME", "defer_iri_grammar", "real_module"]
