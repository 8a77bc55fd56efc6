"""Threads: where the loop awaits and where generated code runs.

The run loop and every model call live on the engine loop
(``engine_loop.py``); generated code runs on a *code thread*: for a root run,
the thread that started it (:class:`CallerThread`: the kernel's main thread
in Jupyter, so the Interrupt button and widgets behave as for a human cell);
for a child run (rlm_query), a daemon thread of its own (:class:`WorkerThread`).

Stopping a run stops its whole tree: a parent that is interrupted cancels
its children's tasks, and a cancelled child interrupts the code running on
its thread (an asynchronous KeyboardInterrupt). A root run stopped from
another thread (a served request or an MCP call cancelled by its caller)
interrupts its code the same way when that code runs on a thread other than
the main one (on the main thread a SIGINT does it). That exception lands
only between bytecodes, so a ``time.sleep`` would finish first: while such a
code thread exists, ``time.sleep`` is wrapped so that a sleep on it wakes at
once when its code is interrupted (every other thread sleeps as before). Any
other blocking C call (a socket read, a lock without timeout) finishes its
current call before the code stops; a child's thread is a daemon, so it
never keeps the process alive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .capture import suspended
from .engine_loop import wait_interruptibly
from .interrupts import Sleeper, clear_async_exc, install_sleep, send_sigint, sigints_sent, sleepers

T = TypeVar("T")

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
            send_sigint(tid)  # a real signal also wakes sleeps and waits; the handler runs on the main thread
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(KeyboardInterrupt))

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Block the code on an engine-loop future (a sub-call); an interrupt cancels it."""
        __tracebackhide__ = True
        return wait_interruptibly(future)

    def close(self) -> None:
        pass


_STOP = object()
_WAKE = object()


class CallerThread(Sleeper, CodeThread):
    """The thread that calls :meth:`serve` (or awaits :meth:`serve_async`)
    runs the code until the run ends. Other threads may also :meth:`post`
    small jobs to it (showing a step, updating a widget), so that everything
    a frontend sees is published from one thread, in order."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._wake: Callable[[], None] | None = None
        self._init_sleeper()
        self._in_job = False  # code posted with run() is running now (what interrupt() may stop)
        self._interrupt_next = False  # an interrupt came between jobs, off the main thread

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

    def bind(self) -> None:
        """Make the calling thread this code thread without serving (a
        person's cell: the kernel runs the cell, we only wait in it)."""
        self.thread_id = threading.get_ident()

    def unbind(self) -> None:
        """Run what is still posted (late widget updates), then let go of the thread."""
        self.drain()
        self.thread_id = None

    def drain(self) -> None:
        """Run every job posted so far, here and now; a failing one is dropped
        (a late widget update must not fail the cell that made it)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                self._run_item(item)

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
            ok, value = self._run_job(fn)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        return False

    @staticmethod
    def _abandon(item: Any) -> None:
        """An interrupt landed after ``item`` was taken off the queue and before
        its outcome was booked (a cell timeout's SIGINT as its job came in): its
        caller hears KeyboardInterrupt instead of waiting for it forever."""
        future = item[1] if isinstance(item, tuple) else None
        if future is None or future.done():
            return
        if future.running() or future.set_running_or_notify_cancel():
            future.set_exception(KeyboardInterrupt())

    def _run_job(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run a job that :meth:`interrupt` may stop. An interrupt's
        KeyboardInterrupt may land at any bytecode until the job is marked
        over (then none can come), so its outcome is booked before that."""
        outcome: list[Any] = [False, KeyboardInterrupt()]  # if an interrupt cuts the bookkeeping short
        with self._cond:
            if self._interrupt_next:  # interrupted just before it started: it never runs
                self._interrupt_next = False
                return False, KeyboardInterrupt()
            self._in_job = True
        try:
            try:
                outcome[:] = True, fn()
            except BaseException as error:  # noqa: BLE001 - handed to the loop
                outcome[:] = False, error
        except KeyboardInterrupt:
            pass  # landed in the bookkeeping: the outcome above stands
        finally:
            while True:
                try:
                    with self._cond:
                        self._in_job = False
                        clear_async_exc(self.thread_id)  # an interrupt that came too late for the job
                    break
                except KeyboardInterrupt:
                    continue
        return outcome[0], outcome[1]

    def interrupt(self) -> bool:
        """Raise KeyboardInterrupt in the code running now: on the main thread
        by a SIGINT; on another thread (a served run) in its code, also in a
        ``time.sleep`` or a sub-call wait. Off the main thread: False, and
        nothing done, when no code runs."""
        tid = self.thread_id
        if tid is None or tid == threading.main_thread().ident:
            super().interrupt()
            return tid is not None
        with self._cond:
            if not self._in_job:
                self._interrupt_next = True  # a job about to start is stopped before it runs
                return False
            self._wake_or_inject(tid)
        self._queue.put(_WAKE)  # a sub-call wait blocked on the queue sees it at once
        return True

    def serve(self, on_interrupt: Callable[[], None]) -> None:
        """Run queued callables until :meth:`close`. A KeyboardInterrupt while
        waiting calls ``on_interrupt`` (which ends the run) and goes on serving
        so that the run can finish writing."""
        self.thread_id = threading.get_ident()
        if self.thread_id != threading.main_thread().ident:
            install_sleep()
            sleepers[self.thread_id] = self
        try:
            while True:
                item = None
                try:
                    item = self._queue.get()
                    if self._run_item(item):
                        return
                except KeyboardInterrupt:
                    self._abandon(item)
                    on_interrupt()
        finally:
            sleepers.pop(self.thread_id, None)
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
                        self._abandon(item)
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


@contextlib.contextmanager
def _default_sigint() -> Iterator[None]:
    """Inside a kernel's awaited cell SIGINT cancels the await; while our code
    runs we want the usual KeyboardInterrupt instead."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


class WorkerThread(Sleeper, CodeThread):
    """A daemon thread of its own (child runs), started with the first job.

    :meth:`interrupt` raises KeyboardInterrupt in the job running now, also
    inside a ``time.sleep`` or a sub-call wait; :meth:`close` (the child run
    ended, maybe cancelled) also interrupts a job still running, and makes
    every later sleep or wait of that job raise at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._current: concurrent.futures.Future[Any] | None = None  # the job running now
        self._job: list[Any] | None = None  # [future, ok, value] of the job being run or booked
        self._init_sleeper()

    async def run(self, fn: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cond:
            if self._thread is None:
                install_sleep()
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        self._jobs.put((fn, future))
        return await asyncio.wrap_future(future)

    # An asynchronous KeyboardInterrupt may land at any bytecode of the job's
    # thread until the job's end is booked, so the bookkeeping can be cut short
    # and picked up again; every job's future is resolved exactly once.

    def _serve(self) -> None:
        self.thread_id = threading.get_ident()
        sleepers[self.thread_id] = self
        try:
            while True:
                try:
                    if self._serve_one():
                        return
                except KeyboardInterrupt:
                    pass  # landed in the bookkeeping: _serve_one finishes the job
        finally:
            sleepers.pop(self.thread_id, None)
            self.thread_id = None

    def _serve_one(self) -> bool:
        """Run the next job; True when the thread should end."""
        if self._job is not None:
            self._end_job()
            return False
        item = self._jobs.get()
        if item is _STOP:
            return True
        fn, future = item
        if not future.set_running_or_notify_cancel():
            return False
        self._job = [future, False, KeyboardInterrupt()]  # the outcome if an interrupt cuts the job short
        with self._cond:
            self._current, self._woken = future, False
        try:
            self._job[1:] = True, fn()
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            self._job[1:] = False, error
        self._end_job()
        return False

    def _end_job(self) -> None:
        with self._cond:
            self._current = None  # interrupt() injects nothing from now on
            clear_async_exc(self.thread_id)
        assert self._job is not None
        (future, ok, value), self._job = self._job, None
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def interrupt(self) -> None:
        with self._cond:
            if self._current is None or self.thread_id is None:
                return  # no code running
            self._wake_or_inject(self.thread_id)

    def _notify(self, _: Any = None) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        __tracebackhide__ = True
        if threading.get_ident() != self.thread_id:
            return wait_interruptibly(future)
        future.add_done_callback(self._notify)
        try:
            self.wait_until(future.done)
        except KeyboardInterrupt:
            future.cancel()
            raise
        return future.result()

    def close(self) -> None:
        with self._cond:
            self._closing = True
        self.interrupt()  # a cancelled child's code may still be running
        self._jobs.put(_STOP)


__all__ = ["CallerThread", "CodeThread", "WorkerThread", "sigints_sent"]
