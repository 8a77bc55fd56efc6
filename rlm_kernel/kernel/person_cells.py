"""The sub-call helpers in cells a person runs: ``llm_query`` and friends
work in any cell of the RLM kernel, show their widgets there, replay the
cell's recorded sub-calls when it runs again, and record the new ones in
that cell's metadata."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .._words import plural
from ..engine.execution.namespace import HELPER_NAMES
from ..engine.protocol.images import images_metadata
from ..engine.trajectory.replay import record_metadata

if TYPE_CHECKING:
    from ..engine.runs.run import Run
    from ..engine.trajectory.records import SubcallRecord
    from .session import KernelSession


class _CellScope:
    """One cell a person runs; its run (for the helpers) is made on first use."""

    def __init__(self, cell_id: str | None, source: str) -> None:
        self.run: Run | None = None
        self.cell_id = cell_id
        self.source = source
        self.records: list[SubcallRecord] = []

    def start(self, run: Run) -> Run:
        self.run = run
        self.records = run.scope.open(self.cell_id, source=self.source)
        return run


class PersonCells:
    def __init__(self, session: KernelSession) -> None:
        self.session = session
        self.shell = session.shell
        self._scope: _CellScope | None = None
        self._proxies = {name: self._proxy(name) for name in HELPER_NAMES}
        self._main_thread = threading.get_ident()
        self.shell.events.register("pre_run_cell", self._pre_run_cell)
        self.shell.events.register("post_run_cell", self._post_run_cell)
        self.install_helpers()

    def install_helpers(self) -> None:
        """Put the helpers (back) into the namespace (a run replaces them with its own)."""
        namespace = self.shell.user_ns
        namespace.update(self._proxies)
        namespace.setdefault("answer", {"content": "", "ready": False})

    def _proxy(self, name: str) -> Any:
        def proxy(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            return self._helper(name)(*args, **kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        proxy.__doc__ = f"{name} for cells a person runs (same as in a run; sub-calls are recorded in this cell)."
        return proxy

    def _helper(self, name: str) -> Any:
        scope = self._scope
        if scope is None:
            raise RuntimeError("The RLM helpers work in cells run by this kernel's main thread.")
        run = scope.run or scope.start(self._new_run())
        return run.entries.values()[name]

    def _pre_run_cell(self, info: Any) -> None:
        self._scope = None
        if self.session.active_run is not None or threading.get_ident() != self._main_thread:
            return
        source = getattr(info, "raw_cell", "") or ""
        if source.lstrip().startswith(("%%rlm", "%rlm")):
            return
        parent = self.session.kernel.get_parent("shell") or {}
        cell_id = getattr(info, "cell_id", None) or (parent.get("metadata") or {}).get("cellId")
        self._scope = _CellScope(cell_id, source)

    def _new_run(self) -> Run:
        from ..builder import Frontends, build_run
        from ..engine.execution.executors import ShellExecutor
        from ..engine.execution.threads import CallerThread
        from ..engine.runs.start import RunStart

        rlm = self.session.rlm()
        thread = CallerThread()
        thread.bind()  # the kernel runs the cell; the helpers only wait in it
        return build_run(
            rlm.options, RunStart.person_cell(self.session.book), query="", context=self.shell.user_ns.get("context"),
            executor=ShellExecutor(self.shell, passthrough=True), code_thread=thread,
            frontends=Frontends(widgets=True, session=self.session), client=rlm.client, check=False,
        )

    def _post_run_cell(self, result: Any) -> None:
        scope, self._scope = self._scope, None
        if scope is None or scope.run is None:
            return
        scope.run.scope.close()
        scope.run.code_thread.unbind()
        if not scope.records:
            return
        book = self.session.book
        records = [record_metadata(r) for r in scope.records]
        replayed = sum(1 for r in scope.records if r.replayed)
        fresh = len(records) - replayed
        book.count(replayed, fresh)
        if scope.cell_id:
            book.set_cell(scope.cell_id, records, scope.source)
            images = images_metadata(scope.records)
            self.session.send("cell_metadata", cell_id=scope.cell_id,
                              rlm={"subcalls": records, **({"images": images} if images else {})},
                              replay={"replayed": book.replayed, "fresh": book.fresh})
        off = "" if book.enabled else " (replay is off)"
        print(f"rlm: {plural(replayed, 'sub-call')} replayed from the notebook, {fresh:,} new{off} "
              f"(session: {book.replayed:,} replayed, {book.fresh:,} new)")


__all__ = ["PersonCells"]
