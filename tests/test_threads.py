"""The thread and interrupt machinery (engine/execution/threads.py, engine/execution/engine_loop.py),
tested directly: where code runs, how posted jobs are served and drained, and
how an interrupt reaches code that sleeps or waits."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from rlm_kernel.engine.execution.engine_loop import engine_loop, submit, wait_interruptibly
from rlm_kernel.engine.execution.threads import CallerThread, WorkerThread


def test_the_engine_loop_is_one_background_thread() -> None:
    loop = engine_loop()
    assert loop is engine_loop()
    where = submit(_current_thread()).result(timeout=5)
    assert where == "rlm-engine" and where != threading.current_thread().name


async def _current_thread() -> str:
    return threading.current_thread().name


def test_a_caller_thread_runs_jobs_on_the_thread_that_serves_it() -> None:
    thread = CallerThread()
    here = threading.get_ident()

    async def work() -> list[int]:
        seen = [await thread.run(threading.get_ident) for _ in range(3)]
        thread.close()
        return seen

    future = submit(work())
    thread.serve(on_interrupt=lambda: None)
    assert future.result(timeout=5) == [here, here, here]
    assert thread.thread_id is None  # let go once served


def test_posted_jobs_run_in_order_and_errors_reach_the_awaiting_task() -> None:
    thread = CallerThread()
    order: list[str] = []

    async def work() -> str:
        thread.post(lambda: order.append("posted 1"))
        thread.post(lambda: order.append("posted 2"))
        try:
            await thread.run(lambda: 1 / 0)
        except ZeroDivisionError:
            order.append("error seen")
        thread.close()
        return "done"

    future = submit(work())
    thread.serve(on_interrupt=lambda: None)
    assert future.result(timeout=5) == "done"
    assert order == ["posted 1", "posted 2", "error seen"]


def test_a_keyboard_interrupt_while_serving_calls_on_interrupt_and_serving_goes_on() -> None:
    thread = CallerThread()
    interrupted = threading.Event()

    def raise_interrupt() -> None:
        raise KeyboardInterrupt

    async def work() -> str:
        thread.post(raise_interrupt)  # as if Ctrl-C landed between jobs
        value = await thread.run(lambda: "still serving")
        thread.close()
        return value

    future = submit(work())
    thread.serve(on_interrupt=interrupted.set)
    assert interrupted.is_set()
    assert future.result(timeout=5) == "still serving"


def test_waiting_in_code_keeps_running_posted_jobs_but_not_other_code() -> None:
    """While a cell waits for its sub-calls, widget updates posted to its
    thread run at once; a code job queued meanwhile waits for the cell."""
    thread = CallerThread()
    order: list[str] = []
    release = concurrent.futures.Future()

    def cell() -> str:
        engine_loop().call_soon_threadsafe(lambda: thread.post(lambda: order.append("widget update")))
        engine_loop().call_later(0.2, lambda: release.set_result("sub-call answer"))
        answer = thread.wait(release)
        order.append("cell got " + answer)
        return answer

    async def work() -> None:
        first = asyncio.ensure_future(thread.run(cell))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(thread.run(lambda: order.append("next cell")))
        await first
        await second
        thread.close()

    future = submit(work())
    thread.serve(on_interrupt=lambda: None)
    future.result(timeout=5)
    assert order == ["widget update", "cell got sub-call answer", "next cell"]


def test_drain_runs_what_was_posted_and_drops_failures() -> None:
    thread = CallerThread()
    thread.bind()
    assert thread.thread_id == threading.get_ident()
    ran: list[int] = []
    thread.post(lambda: ran.append(1))
    thread.post(lambda: 1 / 0)  # a failing late update must not fail the cell
    thread.post(lambda: ran.append(2))
    thread.unbind()
    assert ran == [1, 2]
    assert thread.thread_id is None


def test_wait_interruptibly_cancels_the_future_on_ctrl_c() -> None:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    timer = threading.Timer(0.1, lambda: _interrupt_main())
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        wait_interruptibly(future)
    assert future.cancelled()


def _interrupt_main() -> None:
    import signal

    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # a real Ctrl-C wakes a blocked wait


INTERRUPTED = "interrupted"


def _run_on(worker: WorkerThread, fn):
    """``fn`` on the worker, awaited on the engine loop as a child run does
    (which catches the KeyboardInterrupt: escaping a task, it would stop the loop)."""
    async def job():
        try:
            return await worker.run(fn)
        except KeyboardInterrupt:
            return INTERRUPTED

    return submit(job())


def test_a_worker_thread_runs_jobs_on_a_daemon_thread_of_its_own() -> None:
    worker = WorkerThread("rlm-child-test")
    info = _run_on(worker, lambda: (threading.current_thread().name, threading.current_thread().daemon)).result(5)
    assert info == ("rlm-child-test", True)
    worker.close()


def test_interrupting_a_worker_wakes_a_sleep_at_once() -> None:
    worker = WorkerThread("rlm-child-sleep")
    started = threading.Event()

    def sleepy() -> str:
        started.set()
        time.sleep(30)
        return "slept"

    future = _run_on(worker, sleepy)
    assert started.wait(5)
    time.sleep(0.05)
    begun = time.monotonic()
    worker.interrupt()
    assert future.result(timeout=5) == INTERRUPTED
    assert time.monotonic() - begun < 2
    # the thread lives on for the next job
    assert _run_on(worker, lambda: "next").result(5) == "next"
    worker.close()


def test_interrupting_a_worker_cancels_its_sub_call_wait() -> None:
    worker = WorkerThread("rlm-child-wait")
    pending: concurrent.futures.Future[str] = concurrent.futures.Future()
    started = threading.Event()

    def waiting() -> str:
        started.set()
        return worker.wait(pending)

    future = _run_on(worker, waiting)
    assert started.wait(5)
    time.sleep(0.05)
    worker.interrupt()
    assert future.result(timeout=5) == INTERRUPTED
    assert pending.cancelled()
    worker.close()


def test_closing_a_worker_stops_a_busy_loop_and_every_later_wait() -> None:
    worker = WorkerThread("rlm-child-busy")
    started = threading.Event()

    def busy() -> None:
        started.set()
        while True:
            sum(range(100))

    future = _run_on(worker, busy)
    assert started.wait(5)
    worker.close()
    assert future.result(timeout=5) == INTERRUPTED


def test_sleep_elsewhere_is_untouched_by_the_worker_patch() -> None:
    worker = WorkerThread("rlm-child-patch")
    _run_on(worker, lambda: None).result(5)  # installs the interruptible sleep
    begun = time.monotonic()
    time.sleep(0.05)  # the main thread sleeps as usual
    assert 0.04 <= time.monotonic() - begun < 1
    with pytest.raises(ValueError):
        time.sleep(-1)  # and bad values still raise what time.sleep raises
    worker.close()


def test_interrupt_with_no_code_running_does_nothing() -> None:
    worker = WorkerThread("rlm-child-idle")
    worker.interrupt()
    assert _run_on(worker, lambda: "fine").result(5) == "fine"
    worker.close()
    CallerThread().interrupt()  # never served: no thread to interrupt


def test_stopping_the_engine_loop_ends_its_thread_quietly() -> None:
    # In a process of its own: the engine loop of this one serves the other tests.
    import subprocess
    import sys

    probe = ("from rlm_kernel.engine.execution.engine_loop import engine_loop, stop_engine_loop, submit\n"
             "async def answer():\n    return 42\n"
             "assert submit(answer()).result(5) == 42\n"
             "stop_engine_loop()\n"
             "print(engine_loop().rlm_thread.is_alive())\n")  # the same loop: stopped, not closed
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "False", "")


@pytest.mark.parametrize("code", ["sleep", "busy"])
def test_code_on_a_caller_thread_off_the_main_one_stops_when_interrupted_from_another(code: str) -> None:
    """A served run's code runs on the request's thread, not the main one: an
    interrupt from elsewhere (the caller went away) reaches it in a sleep too."""
    thread = CallerThread()
    started = threading.Event()

    def job() -> str:
        started.set()
        if code == "sleep":
            time.sleep(60)
        else:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                pass
        return "ran to the end"

    async def work() -> str:
        try:
            return await thread.run(job)
        except KeyboardInterrupt:
            return "interrupted"
        finally:
            thread.close()

    future = submit(work())
    server = threading.Thread(target=thread.serve, kwargs={"on_interrupt": lambda: None}, daemon=True)
    server.start()
    assert started.wait(10)
    thread.interrupt()
    assert future.result(timeout=10) == "interrupted"
    server.join(10)
    assert not server.is_alive()


def test_an_interrupt_between_jobs_stops_the_next_job_and_never_the_serving_loop() -> None:
    """Off the main thread, an interrupt that comes between jobs (a cell about
    to start) stops the next job before it runs; it never lands in the loop
    that serves the thread, which goes on serving."""
    thread = CallerThread()
    ran: list[int] = []
    interrupts: list[str] = []

    async def work() -> list[object]:
        first = await thread.run(lambda: ran.append(1) or 1)
        thread.interrupt()
        try:
            second: object = await thread.run(lambda: ran.append(2) or 2)
        except KeyboardInterrupt:
            second = "interrupted before it ran"
        third = await thread.run(lambda: ran.append(3) or 3)
        thread.close()
        return [first, second, third]

    future = submit(work())
    server = threading.Thread(target=thread.serve, kwargs={"on_interrupt": lambda: interrupts.append("loop")},
                              daemon=True)
    server.start()
    assert future.result(timeout=10) == [1, "interrupted before it ran", 3]
    assert ran == [1, 3] and interrupts == []
    server.join(10)


def test_a_run_on_another_thread_stopped_from_outside_interrupts_its_sleeping_cell(server, make_rlm) -> None:
    """What serve and the MCP tool do when their caller goes away: the run
    ends "interrupted" and so does the cell that was sleeping, at once."""
    from _helpers import repl

    from rlm_kernel.engine.trajectory.sink import Sink

    class Grab(Sink):
        def __init__(self) -> None:
            self.run = None
            self.cell_running = threading.Event()

        def run_started(self, run) -> None:  # noqa: ANN001
            self.run = run

        def cell_started(self, run, cell) -> None:  # noqa: ANN001
            self.cell_running.set()

    srv = server(root=[repl("import time\nprint('before')\ntime.sleep(60)\nprint('after')"), "FINAL(never)"])
    grab = Grab()
    results: list = []
    worker = threading.Thread(target=lambda: results.append(
        make_rlm(srv).completion("ctx", "q", sink=grab)), daemon=True)
    worker.start()
    assert grab.cell_running.wait(30)
    grab.run.interrupt()
    worker.join(20)
    assert not worker.is_alive(), "the run went on after it was interrupted"
    [result] = results
    assert result.reason == "interrupted"
    [cell] = [c for c in result.notebook.cells if c.metadata.get("rlm", {}).get("role") == "code"]
    assert cell.metadata["rlm"]["status"] == "interrupted"
    assert "after" not in "".join(o.get("text", "") for o in cell.outputs)
