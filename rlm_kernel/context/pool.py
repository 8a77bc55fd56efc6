"""Converting many files in worker processes: one file in flight per
worker (so memory holds a few files' worth, not the folder's), the largest
first, each with a time limit; a worker that crashes or overruns is ended
and replaced, its file skipped in one sentence. The workers ignore SIGINT:
the loading process ends them all when it is interrupted.

Workers are forked when this process runs no other thread (a script, the
command line), else started from a fork server (a kernel runs threads,
which a plain fork would copy mid-lock).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ContextError

if TYPE_CHECKING:  # multiprocessing is imported when workers start: importing it registers an atexit hook
    from multiprocessing.connection import Connection

Result = tuple[str, Any]  # ("ok", entry) or ("error", sentence)


@dataclass(frozen=True)
class Task:
    index: int
    kind: str
    source: str
    size: int
    path: str | None = None
    url: str | None = None
    encoding: str = "utf-8"
    cache_key: str | None = None
    cache_folder: str | None = None
    url_timeout: float = 30.0

    @property
    def time_limit(self) -> float:
        return 120.0 + 20.0 * self.size / 2**20 + (self.url_timeout if self.url else 0.0)


def run_task(task: Task) -> Result:
    """Convert one input (in a worker, or in this process); keep it in the cache."""
    from .convert import convert

    try:
        if task.url is not None:
            from .urls import fetch_and_convert

            result: Result = ("ok", fetch_and_convert(task.url, task.encoding, task.url_timeout))
        else:
            result = ("ok", convert(task.kind, task.path or "", task.source, task.encoding))
    except ContextError as error:
        result = ("error", str(error))
    except MemoryError:
        result = ("error", f"{task.source!r} needs more memory to convert than is free; load it alone, or free "
                           "memory first.")
    except Exception as error:  # noqa: BLE001 - a converter's own failure on one file is that file's
        detail = str(error).splitlines()[0][:200] if str(error) else "no detail"
        result = ("error", f"{task.source!r} could not be converted ({type(error).__name__}: {detail}).")
    if task.cache_key and task.cache_folder:
        from .cache import Cache

        Cache(task.cache_folder).put(task.cache_key, result)
    return result


def _serve(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        result = run_task(task)
        try:
            conn.send(result)
        except Exception as error:  # noqa: BLE001 - an entry that does not pickle
            conn.send(("error", f"{task.source!r} was converted but could not be handed back "
                                f"({type(error).__name__})."))


def _context() -> Any:
    import multiprocessing

    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["rlm_kernel.context.pool"])
    return context


class _Worker:
    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True, name="rlm-context-worker")
        self.process.start()
        child.close()
        self.task: Task | None = None
        self.deadline = 0.0

    def give(self, task: Task) -> None:
        self.task, self.deadline = task, time.monotonic() + task.time_limit
        self.conn.send(task)

    def end(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(timeout=None if kill else 2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def convert_all(tasks: Sequence[Task], workers: int, done: Callable[[Task, Result], None]) -> None:
    """Convert ``tasks`` on ``workers`` processes, calling ``done`` here as each ends."""
    from multiprocessing.connection import wait

    context = _context()
    queue = deque(sorted(tasks, key=lambda t: -t.size))
    pool = [_Worker(context) for _ in range(min(workers, len(queue)))]
    try:
        for worker in pool:
            if queue:
                worker.give(queue.popleft())
        while any(w.task is not None for w in pool):
            busy = {w.conn: w for w in pool if w.task is not None}
            for conn in wait(list(busy), timeout=0.2):
                worker = busy[conn]  # type: ignore[index]
                task = worker.task
                assert task is not None
                try:
                    result: Result = worker.conn.recv()
                except (EOFError, OSError):
                    result = ("error", f"{task.source!r} made its converter crash (exit code "
                                       f"{worker.process.exitcode}); it is skipped.")
                    pool[pool.index(worker)] = worker = _replace(worker, context)
                worker.task = None
                done(task, result)
                if queue:
                    worker.give(queue.popleft())
            now = time.monotonic()
            for position, worker in enumerate(pool):
                if worker.task is not None and now > worker.deadline:
                    task = worker.task
                    pool[position] = fresh = _replace(worker, context)
                    done(task, ("error", f"{task.source!r} took longer than {task.time_limit:.0f} s to convert; "
                                         "it is skipped."))
                    if queue:
                        fresh.give(queue.popleft())
    except BaseException:
        for worker in pool:
            worker.end(kill=True)
        raise
    for worker in pool:
        worker.end()


def _replace(worker: _Worker, context: Any) -> _Worker:
    worker.end(kill=True)
    return _Worker(context)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


__all__ = ["Task", "convert_all", "cpu_count", "run_task"]
