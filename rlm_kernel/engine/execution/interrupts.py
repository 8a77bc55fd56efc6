"""How an interrupt reaches code running on a thread: a SIGINT on the main
thread; elsewhere an asynchronous KeyboardInterrupt, which lands only between
bytecodes, so sleeps and our own waits on such a thread are made ones an
interrupt wakes (see ``threads.py``'s docstring)."""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Callable

_sigints_sent = 0


def send_sigint(thread_id: int) -> None:
    """Interrupt the main thread as Ctrl-C does, counted (:func:`sigints_sent`)."""
    global _sigints_sent
    _sigints_sent += 1
    signal.pthread_kill(thread_id, signal.SIGINT)


def sigints_sent() -> int:
    """How many SIGINTs the engine sent to the main thread itself (cell
    timeouts), so that a caller counting SIGINTs can tell them from a user's Ctrl-C."""
    return _sigints_sent


class Sleeper:
    """A code thread whose code an interrupt can wake from ``time.sleep``
    and our own waits, not only between bytecodes."""

    def _init_sleeper(self) -> None:
        self._cond = threading.Condition()
        self._waiting = False  # the job is blocked in wait_until
        self._woken = False  # an interrupt for that wait
        self._closing = False

    def _stopped(self) -> bool:
        return self._closing

    def wait_until(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """On this thread: block until ``done()`` or ``timeout`` seconds;
        KeyboardInterrupt when interrupted meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting = True
            try:
                while not (self._woken or self._stopped() or done()):
                    left = threading.TIMEOUT_MAX if deadline is None else deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(min(left, threading.TIMEOUT_MAX))
                if self._woken or self._stopped():
                    self._woken = False
                    raise KeyboardInterrupt
            finally:
                self._waiting = False

    def _wake_or_inject(self, thread_id: int) -> None:
        """Under ``_cond``: wake a wait of the job, or raise in it."""
        if self._waiting:
            self._woken = True
            self._cond.notify_all()
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(KeyboardInterrupt))


def clear_async_exc(thread_id: int | None) -> None:
    if thread_id is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)


sleepers: dict[int, Sleeper] = {}  # code threads whose sleeps an interrupt wakes
_real_sleep = time.sleep
_sleep_lock = threading.Lock()


def _interruptible_sleep(seconds: float) -> None:
    """``time.sleep`` that an interrupt of its code thread wakes (see the module docstring)."""
    worker = sleepers.get(threading.get_ident())
    if worker is None or type(seconds) not in (int, float) or not 0 <= seconds < float("inf"):
        return _real_sleep(seconds)  # also raises what time.sleep raises for bad values
    worker.wait_until(lambda: False, seconds)
    return None


_interruptible_sleep.__name__ = _interruptible_sleep.__qualname__ = "sleep"
_interruptible_sleep.__doc__ = _real_sleep.__doc__


def install_sleep() -> None:
    with _sleep_lock:
        if time.sleep is _real_sleep:
            time.sleep = _interruptible_sleep


__all__ = ["Sleeper", "clear_async_exc", "install_sleep", "send_sigint", "sigints_sent", "sleepers"]
