"""What runs inside the other kernel (a sandbox's or a gateway's).

The executor installs a :class:`Bootstrap` as ``__rlm_sandbox__``: the run's
entries (``engine.namespace.Entries``, the same class as outside) over a
stand-in run whose helpers send each call out through the stdin channel (an
``input_request`` whose prompt starts with :data:`MARK`); the engine outside
makes the call with its budgets and keys. Only JSON crosses the boundary.
A context may be read here from paths (:meth:`Bootstrap.load`, the files
where this kernel runs) or arrive as a file the engine wrote (``_load``).
The sandbox adds its limits (``sandbox/inside.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from types import SimpleNamespace
from typing import Any

MARK = "\x00rlm-sandbox-call:"
EOF = "\x00rlm-sandbox-eof"  # the reply to input() when outside has no line to give
JSON_TYPES = (str, int, float, bool, type(None))
PROBE_CHARS = 65536


def encode(value: Any) -> Any:
    """A value as JSON, or its str() when it is not plain data."""
    if isinstance(value, JSON_TYPES):
        return {"json": value}
    try:
        text = json.dumps(value)
        if len(text) < 50_000_000:
            return {"json": json.loads(text)}
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return {"text": str(value), "type": type(value).__name__}
    except Exception as error:  # noqa: BLE001 - a value's __str__ may raise anything
        return {"text": f"<unprintable {type(value).__name__}: {error}>", "type": type(value).__name__}


class Reply:
    """A user expression's value: its repr is the JSON the executor reads."""

    def __init__(self, value: Any) -> None:
        self.text = json.dumps(value)

    def __repr__(self) -> str:
        return self.text


def _call_out(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    from rlm_kernel.remote.calls import RemoteJob, portable

    args, kwargs = portable(name, args, kwargs)
    reply = json.loads(input(MARK + json.dumps({"name": name, "args": args, "kwargs": kwargs})))
    if "error" in reply:
        kind, message = reply["error"]
        raise type(kind, (Exception,), {"__module__": "rlm_kernel"})(message)
    if "job" in reply:  # wait=False: the job runs outside
        return RemoteJob(reply["job"], reply["helper"], _call_out)
    return reply["value"]


def _stub(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return _call_out(name, list(args), kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class Bootstrap:
    """``__rlm_sandbox__`` in the confined namespace: installed once per
    confined kernel; :meth:`setup` makes a run's entries (again for each run)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.cpu_seconds = 0.0
        self.context: Any = None  # the run's, once set up
        self.entries: Any = None
        self.loaded: dict[str, Any] = {}  # what `set` put in the namespace
        self.read_values: dict[str, Any] = {}  # loaded from files by `read`, for `set` or the setup to take
        self.context_from: str | None = None  # "files": read here from its files; "value": passed through a file
        self.pending = False  # a restore the last cell's report announced, done before the next cell
        shell.events.register("pre_run_cell", self._before_cell)

    def setup(self, setup_json: str) -> None:
        from rlm_kernel.engine.execution.namespace import Entries, Installs

        setup = json.loads(setup_json)
        self.cpu_seconds = float(setup.get("cpu_seconds") or 0)
        context = self.shell.user_ns.get("context") if setup.get("context_inside") else None
        if setup.get("context_file"):
            context, self.context_from = _load(setup["context_file"]), "value"
        elif "context" in self.read_values:
            context, self.context_from = self.read_values.pop("context"), "files"
        helpers = SimpleNamespace(**{n: _stub(n) for n in setup["helpers"]})
        tools = {n: _stub(n) for n in setup.get("tools", [])}
        self.context = context
        installs = Installs(helpers, context=lambda: self.context, tools=lambda: tools,
                            continued=bool(setup.get("history")), rerun=bool(setup.get("prelude")))
        self.entries = Entries(SimpleNamespace(namespace=self.shell.user_ns, shell=self.shell), installs)
        self.pending = False

    def call(self, method: str, *args: Any) -> Reply:
        entries = self.entries
        if method == "names":
            return Reply([n for n in self.shell.user_ns if not n.startswith("_")])
        if method == "get":
            return Reply(encode(self.shell.user_ns[args[0]]) if args[0] in self.shell.user_ns else None)
        if method == "has":
            return Reply(args[0] in self.shell.user_ns)
        if method == "describe":  # what the root model is told of a value here, which stays here
            from rlm_kernel.engine.protocol.prompts import describe_context

            value = self.shell.user_ns.get(args[0])
            return Reply(None if args[0] not in self.shell.user_ns else describe_context(value, args[1]))
        if method == "read":  # `context` from the files it was loaded from outside: None, or why not
            return Reply(self.read(*args))
        if method == "load":  # `context` from paths where this kernel runs: its description, or why not
            return Reply(self.load(*args))
        if method == "set":  # `context` (`%rlm context PATH`) or `rlm_result`, made outside, for the person's cells
            value = self.read_values.pop(args[0]) if args[1] is None else _load(args[1])
            self.shell.user_ns[args[0]] = self.loaded[args[0]] = value
            if args[0] == "context":
                self.context_from = "files" if args[1] is None else "value"
            return Reply(None)
        if method == "loaded":  # is `name` still the value set from outside (not rebound by a cell)?
            return Reply(args[0] in self.loaded and self.shell.user_ns.get(args[0]) is self.loaded[args[0]])
        if method == "person_helpers":  # the sub-call helpers in a person's cells, before any run
            for name in args[0]:
                self.shell.user_ns.setdefault(name, _stub(name))
            self.shell.user_ns.setdefault("answer", {"content": "", "ready": False})
            return Reply(None)
        if method == "number":  # the execution count the page shows for the next cell
            return self.number(args[0])
        if method == "restore":
            self.pending = False
            return Reply(entries.restore())
        if method == "check_answer":
            found, note = entries.check_answer()
            return Reply([_final(found), note])
        if method == "resolve":
            found, note = entries.resolve(*args)
            return Reply([_final(found), note])
        if method == "forget":  # the context may be the one the re-run cells made
            if "context" in self.shell.user_ns and self.context is None:
                self.context = self.shell.user_ns["context"]
            entries.forget()
            return Reply(None)
        if method == "after":
            return self.after()
        if method == "variables":
            return Reply(entries._variables())
        raise ValueError(method)

    def read(self, name: str, paths: list[str], encoding: str, expected: list[Any]) -> str | None:
        """Load ``name`` here with the engine's own loader from ``paths`` (the
        files outside loaded it from, read-only here); kept for ``set`` or the
        setup when it is what outside holds (``expected``: its fingerprint)."""
        from rlm_kernel.context.files import load_context
        try:
            value: Any = load_context(paths, encoding=encoding, skip_binary=False).value
        except Exception as error:  # noqa: BLE001 - said outside, which passes the value through a file instead
            return f"{type(error).__name__}: {error}"
        if expected[0] == "list" and isinstance(value, str):
            value = [value]  # one text file of a folder whose other files were skipped
        if fingerprint(value) != expected:
            return "the files no longer hold what was loaded from them"
        self.read_values[name] = value
        return None

    def number(self, count: int) -> Reply:
        self.shell.execution_count = int(count)
        return Reply(None)

    def after(self) -> Reply:
        """Read after every cell: FINAL's answer (then cleared) and the answer dict's state."""
        if self.entries is None:
            return Reply({})
        given, self.entries.given = self.entries.given, None
        found, note = self.entries.check_answer()
        report = {"given": _final(given), "check": [_final(found), note], "restore": None}
        if self.entries._installed:
            # what a restore would put back, said now; done before the next cell runs (the
            # step's answer is read first, as outside), saving the engine a round trip per step
            namespace, missing = self.shell.user_ns, object()
            report["restore"] = [name for name, value in self.entries.values().items()
                                 if name != "answer" and namespace.get(name, missing) is not value]
            self.pending = True
        return Reply(report)

    # -- between cells ------------------------------------------------------
    def load(self, name: str, paths: list[str], encoding: str) -> dict[str, Any]:
        """Load ``name`` here, from paths where this kernel runs, with the
        engine's own loader; kept for the setup (or ``set``). Returns what
        the root model is told of it, or the one sentence why not."""
        import glob

        from rlm_kernel.context.files import load_context
        from rlm_kernel.context.urls import is_url
        from rlm_kernel.engine.protocol.prompts import describe_context

        missing = [p for p in paths if not is_url(p) and not glob.has_magic(p) and not os.path.exists(p)]
        if missing:
            where = f"{os.uname().nodename}" if hasattr(os, "uname") else "its machine"
            return {"error": f"{missing[0]} does not exist where the kernel runs ({where}): paths are read there, "
                             "not here; give a path on that machine, or pass the text itself."}
        try:
            loaded = load_context(paths, encoding=encoding, progress=_Progress())
        except Exception as error:  # noqa: BLE001 - said outside in one sentence
            return {"error": f"{type(error).__name__}: {error}"}
        self.read_values[name] = loaded.value
        return {"description": describe_context(loaded.value, loaded.sources), "sources": loaded.sources,
                "summary": loaded.summary, "skipped": bool(getattr(loaded, "skipped", None))}

    def _before_cell(self, *_: Any) -> None:
        if self.pending and self.entries is not None:
            self.pending = False
            self.entries.restore()


class _Progress:
    """The load's progress on this kernel's stdout, which the engine shows as it comes."""

    def __init__(self) -> None:
        self.shown = -1

    def __call__(self, done: int, total: int, source: str) -> None:
        if total > 1 and (done * 10 // total) != self.shown:
            self.shown = done * 10 // total
            print(f"loading the context where the kernel runs: {done:,} of {total:,} files", flush=True)


def fingerprint(value: Any) -> list[Any] | None:
    """What the inside checks its load against: the kind, the characters and
    a digest of each part's ends; None for a value no file load gives."""
    parts = [value] if isinstance(value, str) else value
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        return None
    from rlm_kernel.context.kinds import TEXT

    if any(getattr(p, "kind", "text") not in TEXT for p in parts):
        return None  # converted documents go in as they are (a pickle), not converted again inside
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(part[:PROBE_CHARS].encode("utf-8", "surrogatepass"))
        digest.update(part[-PROBE_CHARS:].encode("utf-8", "surrogatepass"))
    return ["str" if isinstance(value, str) else "list", sum(len(p) for p in parts), digest.hexdigest()]


def _final(found: Any) -> Any:
    if found is None:
        return None
    name, value = found
    return [name, encode(value)]


def _load(path: str) -> Any:
    with open(path, "rb") as handle:
        value = pickle.load(handle)  # written by the engine outside, never read back out
    os.unlink(path)
    return value


def install(shell: Any, kind: type[Bootstrap] = Bootstrap) -> None:
    if "__rlm_sandbox__" not in shell.user_ns:
        shell.user_ns["__rlm_sandbox__"] = boot = kind(shell)
        shell.user_ns_hidden["__rlm_sandbox__"] = boot
        kernel = getattr(shell, "kernel", None)
        if kernel is not None:  # ipykernel makes `input` its raw_input before each cell: this one says EOF too
            kernel.raw_input = _eof_aware(kernel.raw_input)


def _eof_aware(raw_input: Any) -> Any:
    def ask(prompt: str = "") -> str:
        answer = raw_input(prompt)
        if answer == EOF:  # outside had no line to give (a headless run whose stdin has ended)
            raise EOFError("EOF when reading a line")
        return answer

    return ask
