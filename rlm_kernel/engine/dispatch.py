"""Threads: where the loop awaits and where generated code runs.

The run loop and every model call live on one background asyncio loop (the
*engine loop*), so all sub-calls of a run share one concurrency limit and the
caller's thread stays free. Generated code runs on a *code thread*: for a
root run, the thread that started it (the kernel's main thread in Jupyter,
so the Interrupt button and widgets behave as for a human cell); for a child
run (rlm_query), a thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import queue
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .capture import suspended

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def engine_loop() -> asyncio.AbstractEventLoop:
    """The process-wide engine loop, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="rlm-engine", daemon=True)
            thread.start()
            ready.wait()
            _loop = loop
            loop.rlm_thread = thread  # type: ignore[attr-defined]
        return _loop


def stop_engine_loop(timeout: float = 2.0) -> None:
    """Stop the engine loop at exit, before litellm's own exit handler flushes
    its logging queue in a loop of its own: with ours still running, both
    took the same queued coroutine and litellm printed a traceback."""
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return
    loop.call_soon_threadsafe(loop.stop)
    thread = getattr(loop, "rlm_thread", None)
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    return asyncio.run_coroutine_threadsafe(coro, engine_loop())


def wait_interruptibly(future: concurrent.futures.Future[T]) -> T:
    """Block on an engine-loop future; Ctrl-C / Interrupt cancels it."""
    __tracebackhide__ = True
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise


class CodeThread:
    """Runs callables on the thread that owns a run's namespace."""

    thread_id: int | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        raise NotImplementedError

    def interrupt(self) -> None:
        """Raise KeyboardInterrupt in the code running now (cell timeout)."""
        tid = self.thread_id
        if tid is None:
            return
        if tid == threading.main_thread().ident:
            # A real signal also wakes sleeps and waits; the handler runs on the main thread.
            signal.pthread_kill(tid, signal.SIGINT)
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(KeyboardInterrupt))

    def close(self) -> None:
        pass


_STOP = object()
_WAKE = object()


class CallerThread(CodeThread):
    """The thread that calls :meth:`serve` (or awaits :meth:`serve_async`)
    runs the code until the run ends. Other threads may also :meth:`post`
    small jobs to it (showing a step, updating a widget), so that everything
    a frontend sees is published from one thread, in order."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._wake: Callable[[], None] | None = None

    def _put(self, item: Any) -> None:
        self._queue.put(item)
        wake = self._wake
        if wake is not None:
            wake()

    async def run(self, fn: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._put((fn, future))
        return await asyncio.wrap_future(future)

    def post(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the code thread when it is next free; don't wait."""
        self._put((fn, None))

    def close(self) -> None:
        self._put(_STOP)

    def _run_item(self, item: Any) -> bool:
        """Run one queued item; True when the run is over."""
        if item is _STOP:
            return True
        if item is _WAKE:
            return False
        fn, future = item
        if future is None:
            fn()
        elif future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as error:  # noqa: BLE001 - handed to the loop
                future.set_exception(error)
        return False

    def serve(self, on_interrupt: Callable[[], None]) -> None:
        """Run queued callables until :meth:`close`. A KeyboardInterrupt while
        waiting calls ``on_interrupt`` (which ends the run) and goes on serving
        so that the run can finish writing."""
        self.thread_id = threading.get_ident()
        try:
            while True:
                try:
                    if self._run_item(self._queue.get()):
                        return
                except KeyboardInterrupt:
                    on_interrupt()
        finally:
            self.thread_id = None

    async def serve_async(self, on_interrupt: Callable[[], None]) -> None:
        """:meth:`serve` for a thread that runs an asyncio loop (the kernel's):
        between jobs the loop is free, so comm messages from the frontend
        (a reconnecting page, approvals) are handled during the run. Code runs
        with the default SIGINT handler, so Interrupt stops a busy cell."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        self._wake = lambda: loop.call_soon_threadsafe(wake.set)
        wake.set()  # jobs queued before we started listening
        self.thread_id = threading.get_ident()
        try:
            while True:
                try:
                    await wake.wait()
                except asyncio.CancelledError:
                    on_interrupt()
                    continue
                wake.clear()
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        with _default_sigint():
                            if self._run_item(item):
                                return
                    except KeyboardInterrupt:
                        on_interrupt()
        finally:
            self._wake = None
            self.thread_id = None

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Block the code (a sub-call) on ``future`` while still running posted
        jobs, so widgets and status keep updating. Ctrl-C cancels ``future``."""
        __tracebackhide__ = True
        if threading.get_ident() != self.thread_id:
            return wait_interruptibly(future)
        future.add_done_callback(lambda _: self._queue.put(_WAKE))
        deferred = []
        try:
            while not future.done():
                item = self._queue.get()
                if item is _STOP or (item is not _WAKE and item[1] is not None):
                    deferred.append(item)  # not ours to run inside a cell
                    continue
                with suspended():  # a status update is not the cell's output
                    self._run_item(item)
        except KeyboardInterrupt:
            future.cancel()
            raise
        finally:
            for item in deferred:
                self._put(item)
        return future.result()


class _default_sigint:  # noqa: N801
    """Inside a kernel's awaited cell SIGINT cancels the await; while our code
    runs we want the usual KeyboardInterrupt instead."""

    def __enter__(self) -> None:
        self._saved = None
        if threading.current_thread() is threading.main_thread():
            self._saved = signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)


class WorkerThread(CodeThread):
    """A thread of its own (child runs)."""

    def __init__(self, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[[], T]) -> T:
        def call() -> T:
            self.thread_id = threading.get_ident()
            try:
                return fn()
            finally:
                self.thread_id = None

        return await asyncio.wrap_future(self._pool.submit(call))

    def close(self) -> None:
        self._pool.shutdown(wait=False)
