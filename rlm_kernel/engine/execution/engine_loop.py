"""The engine loop: one background asyncio loop per process, on which every
run's loop and every model call live, so all sub-calls of a run share one
concurrency limit and the threads that run code stay free."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

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
                # One task the loop runs until stopped, rather than run_forever:
                # anyio (under litellm and httpx) ties its worker threads to the
                # task run_until_complete runs. Without it, each streamed root
                # call started a thread of its own and stopped it at the call's
                # end (litellm puts the reply together in a worker thread).
                loop.run_until_complete(_serve_until_stopped(loop))

            thread = threading.Thread(target=serve, name="rlm-engine", daemon=True)
            thread.start()
            ready.wait()
            _loop = loop
            loop.rlm_thread = thread  # type: ignore[attr-defined]
        return _loop


async def _serve_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    stopped = loop.create_future()
    loop.rlm_stopped = stopped  # type: ignore[attr-defined]
    await stopped


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    stopped = getattr(loop, "rlm_stopped", None)
    if stopped is None:  # its task has not started yet: it will have by the next turn
        loop.call_soon(_stop, loop)
    elif not stopped.done():
        stopped.set_result(None)


def stop_engine_loop(timeout: float = 2.0) -> None:
    """Stop the engine loop at exit, before litellm's own exit handler flushes
    its logging queue in a loop of its own: with ours still running, both
    took the same queued coroutine and litellm printed a traceback."""
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return
    loop.call_soon_threadsafe(_stop, loop)
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


__all__ = ["engine_loop", "stop_engine_loop", "submit", "wait_interruptibly"]
