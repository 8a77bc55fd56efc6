"""Executors run one generated cell in a namespace and return its outputs.

* :class:`ShellExecutor` runs through an IPython shell (magics, display,
  tracebacks as for a human cell): the kernel's own shell inside Jupyter, a
  private headless shell for the command line and the Python API.
* :class:`PlainExecutor` runs child runs (rlm_query) in a namespace of their
  own, safely from any thread.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import threading
import time
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets import Type

from . import tracebacks
from .capture import CellCapture, capturing, current
from .namespace import Entries, Installs


@dataclass
class CellResult:
    outputs: list[dict[str, Any]]
    status: str  # ok | error | interrupted
    execution_count: int | None
    model_view: str
    output_chars: int
    duration_s: float
    error_name: str | None = None


class Executor:
    namespace: dict[str, Any]

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the namespace (a finished headless run must not keep its context alive)."""

    def make_entries(self, installs: Installs) -> Entries:
        """What a run installs in this executor's namespace (a namespace in
        another process keeps them there)."""
        return Entries(self, installs)

    def child_executor(self) -> Executor:
        """Where a child run's (rlm_query's) code runs."""
        return PlainExecutor()


def _finish(capture: CellCapture, status: str, error_name: str | None, count: int | None,
            started: float, view_limit: int) -> CellResult:
    view, chars = capture.model_view(view_limit)
    return CellResult(
        outputs=capture.outputs(), status=status, execution_count=count, model_view=view,
        output_chars=chars, duration_s=time.monotonic() - started, error_name=error_name,
    )


# -- IPython shells -----------------------------------------------------------


class _CapturingDisplayHook(DisplayHook):
    """Records a cell's result instead of printing ``Out[n]:``."""

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> None:
        capture = current()
        if capture is not None:
            capture.result(format_dict, md_dict, self.shell.execution_count)

    def finish_displayhook(self) -> None:
        pass


class _CapturingDisplayPublisher(DisplayPublisher):
    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None, source: Any = None,
                *, transient: dict[str, Any] | None = None, update: bool = False, **kwargs: Any) -> None:
        capture = current()
        if capture is not None:
            capture.display(data, metadata, transient=transient, update=update)

    def clear_output(self, wait: bool = False) -> None:
        capture = current()
        if capture is not None:
            capture.clear()


class HeadlessShell(InteractiveShell):
    """An IPython shell that records outputs into the current cell capture
    and never prints to the terminal."""

    displayhook_class = Type(_CapturingDisplayHook)
    display_pub_class = Type(_CapturingDisplayPublisher)

    def _showtraceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        capture = current()
        if capture is not None:
            capture.error(etype.__name__, str(evalue), stb)

    def init_history(self) -> None:  # no sqlite history file for headless runs
        from IPython.core.history import HistoryManager

        self.history_manager = HistoryManager(shell=self, parent=self, enabled=False)
        self.configurables.append(self.history_manager)


def new_headless_shell(namespace: dict[str, Any] | None = None) -> HeadlessShell:
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.autocall = 0
    if not InteractiveShell.initialized():
        # display() and friends look up the singleton shell; make it a quiet one.
        HeadlessShell.instance(config=config)
    else:
        install_shell_hooks(InteractiveShell.instance())
    shell = HeadlessShell(config=config, user_ns=namespace if namespace is not None else {})
    tracebacks.install(shell)
    for each in (InteractiveShell.instance(), shell):
        _show_figures(each)
    return shell


def _show_figures(shell: InteractiveShell) -> None:
    """``display(fig)`` of a matplotlib figure shows it as a PNG, as in a
    kernel (without importing matplotlib: the formatter waits for its type)."""
    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type_by_name("matplotlib.figure", "Figure", _figure_png)


def _figure_png(figure: Any) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(figure, "png")


def install_shell_hooks(shell: InteractiveShell) -> None:
    """Make an existing shell (a kernel's) also record into the current
    capture; it keeps publishing to its frontend when the capture passes
    through."""
    if isinstance(shell, HeadlessShell) or getattr(shell, "_rlm_hooks_installed", False):
        return
    tracebacks.install(shell)
    publisher = shell.display_pub
    original_publish = publisher.publish
    original_clear = publisher.clear_output

    def publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        capture = current()
        if capture is not None:
            capture.display(data, metadata, transient=kwargs.get("transient"), update=kwargs.get("update", False))
            if not capture.passthrough:
                return None
            data = capture.redact_bundle(data)
        return original_publish(data, metadata, *args, **kwargs)

    def clear_output(*args: Any, **kwargs: Any) -> Any:
        capture = current()
        if capture is not None:
            capture.clear()
            if not capture.passthrough:
                return None
        return original_clear(*args, **kwargs)

    publisher.publish = publish
    publisher.clear_output = clear_output

    hook = shell.displayhook
    original_write = hook.write_format_data

    def write_format_data(format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> Any:
        capture = current()
        if capture is not None:
            capture.result(format_dict, md_dict, shell.execution_count)
            format_dict = capture.redact_bundle(format_dict)
        return original_write(format_dict, md_dict)

    hook.write_format_data = write_format_data

    original_showtraceback = shell._showtraceback

    def _showtraceback(etype: type, evalue: BaseException, stb: list[str]) -> Any:
        capture = current()
        if capture is not None:
            capture.error(etype.__name__, str(evalue), stb)
            if not capture.passthrough:
                return None
            evalue, stb = capture.redact(str(evalue)), [capture.redact(line) for line in stb]
        return original_showtraceback(etype, evalue, stb)

    shell._showtraceback = _showtraceback
    shell._rlm_hooks_installed = True


MAX_TRACEBACK_FRAMES = 60  # a RecursionError's 3,000 frames took IPython ~30 s to format


def _trim_deep_tracebacks(shell: InteractiveShell) -> None:
    """IPython formats each frame of a traceback (scanning every loaded
    module per frame); for generated cells keep the first and last frames of
    a very deep one."""
    handler = getattr(shell, "InteractiveTB", None)
    if handler is None or getattr(handler, "_rlm_trimmed", False):
        return
    original = handler.structured_traceback

    def structured_traceback(etype: Any, evalue: Any, etb: Any = None, *args: Any, **kwargs: Any) -> Any:
        if current() is not None and isinstance(etb, types.TracebackType):
            etb = _shorten(etb, MAX_TRACEBACK_FRAMES)
        return original(etype, evalue, etb, *args, **kwargs)

    handler.structured_traceback = structured_traceback
    handler._rlm_trimmed = True


def _shorten(tb: types.TracebackType, limit: int) -> types.TracebackType:
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next  # type: ignore[assignment]
    if len(frames) <= limit:
        return frames[0]
    kept = frames[: limit // 3] + frames[-(limit - limit // 3):]
    chain = None
    for item in reversed(kept):
        chain = types.TracebackType(chain, item.tb_frame, item.tb_lasti, item.tb_lineno)
    assert chain is not None
    return chain


# One IPython shell runs one cell at a time: run_cell swaps process-wide hooks
# (sys.displayhook, builtins), so concurrent headless runs take turns per cell.
_shell_lock = threading.RLock()


class ShellExecutor(Executor):
    def __init__(self, shell: InteractiveShell, *, passthrough: bool, max_stored_chars: int = 200_000) -> None:
        self.shell = shell
        self.passthrough = passthrough
        self.max_stored_chars = max_stored_chars
        install_shell_hooks(shell)
        _trim_deep_tracebacks(shell)

    def close(self) -> None:
        shell = self.shell
        if isinstance(shell, HeadlessShell) and shell is not InteractiveShell._instance:
            import atexit

            atexit.unregister(shell.atexit_operations)
            shell.user_ns.clear()
            shell.user_ns_hidden.clear()
            # Out[n] results live on in the history manager (not displayhook.flush(): it runs gc.collect()).
            output_hist = getattr(shell.history_manager, "output_hist", None)
            if output_hist is not None:
                output_hist.clear()

    @property
    def namespace(self) -> dict[str, Any]:
        return self.shell.user_ns

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        capture = CellCapture(passthrough=self.passthrough, max_stored_chars=self.max_stored_chars)
        started = time.monotonic()
        with _shell_lock, capturing(capture), _output_history_off(self.shell):
            result = self.shell.run_cell(code, store_history=True)
        error = result.error_in_exec or result.error_before_exec
        if isinstance(error, KeyboardInterrupt):
            status = "interrupted"
        else:
            status = "error" if error is not None else "ok"
        count = result.execution_count
        return _finish(capture, status, type(error).__name__ if error else None, count, started, view_limit)


class _Discarding(dict):  # type: ignore[type-arg]
    """An output history that keeps nothing: every lookup is a fresh list."""

    def __contains__(self, key: object) -> bool:
        return False

    def __getitem__(self, key: Any) -> list[Any]:
        return []


@contextlib.contextmanager
def _output_history_off(shell: InteractiveShell) -> Iterator[None]:
    """IPython 9 also appends everything a cell writes to
    ``history_manager.outputs``, a dict shared by every shell in the process
    and never trimmed: a generated cell printing a gigabyte kept a gigabyte.
    Generated cells keep their outputs in the (bounded) cell capture instead."""
    manager = getattr(shell, "history_manager", None)
    if manager is None or not hasattr(manager, "outputs"):
        yield
        return
    saved = manager.__dict__.get("outputs", _MISSING)
    manager.outputs = _Discarding()
    try:
        yield
    finally:
        if saved is _MISSING:
            del manager.outputs
        else:
            manager.outputs = saved


_MISSING = object()


# -- plain namespaces (child runs) ----------------------------------------------


class PlainExecutor(Executor):
    """exec() in a dict of its own; the last expression's value is shown."""

    def __init__(self, namespace: dict[str, Any] | None = None, *, max_stored_chars: int = 200_000) -> None:
        self.namespace = namespace if namespace is not None else {}
        self.namespace.setdefault("__name__", "__rlm_child__")
        self.max_stored_chars = max_stored_chars
        self.execution_count = 0

    def execute(self, code: str, *, cell_id: str, view_limit: int) -> CellResult:
        self.execution_count += 1
        count = self.execution_count
        capture = CellCapture(passthrough=False, max_stored_chars=self.max_stored_chars)
        started = time.monotonic()
        filename = f"<rlm-cell-{cell_id}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        status, error_name = "ok", None
        with capturing(capture):
            try:
                tree = ast.parse(code, filename=filename)
                last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
                exec(compile(tree, filename, "exec"), self.namespace)
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), filename, "eval"), self.namespace)
                    if value is not None:
                        self.namespace["_"] = value
                        capture.result({"text/plain": _safe_repr(value)}, {}, count)
            except BaseException as error:  # noqa: BLE001 - generated code may raise anything
                status = "interrupted" if isinstance(error, KeyboardInterrupt) else "error"
                error_name = type(error).__name__
                frames = traceback.extract_tb(error.__traceback__)
                skip = next((i for i, f in enumerate(frames) if f.filename == filename), len(frames))
                lines = traceback.format_list(frames[skip:]) if skip < len(frames) else []
                if isinstance(error, SyntaxError):
                    lines = traceback.format_exception_only(type(error), error)[:-1]
                stb = ["Traceback (most recent call last):\n", *lines] if lines else []
                capture.error(error_name, str(error), [*stb, f"{error_name}: {error}"])
        return _finish(capture, status, error_name, count, started, view_limit)


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # noqa: BLE001
        return f"<unprintable {type(value).__name__}: {error}>"
    return text
