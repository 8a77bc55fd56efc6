"""Running a root run: the loop on the engine loop, the code on this thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .dispatch import CallerThread, submit

if TYPE_CHECKING:
    from .loop import Run, RunResult


def run_here(run: Run) -> RunResult:
    """Run ``run`` to its end; its code executes on the calling thread, which
    is where Ctrl-C / the kernel's Interrupt lands."""
    thread = run.code_thread
    if not isinstance(thread, CallerThread):
        raise TypeError("run_here needs a run whose code thread is a CallerThread")
    future = submit(run.run())
    future.add_done_callback(lambda _: thread.close())
    thread.serve(on_interrupt=run.interrupt)
    return future.result()


async def run_here_async(run: Run) -> RunResult:
    """:func:`run_here` for a caller that is itself a coroutine on an asyncio
    loop (the kernel's): the loop stays responsive between code cells."""
    thread = run.code_thread
    if not isinstance(thread, CallerThread):
        raise TypeError("run_here_async needs a run whose code thread is a CallerThread")
    future = submit(run.run())
    future.add_done_callback(lambda _: thread.close())
    await thread.serve_async(on_interrupt=run.interrupt)
    return future.result()
