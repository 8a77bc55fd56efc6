"""``rlm-kernel batch TASKS.jsonl --out DIR``: many runs, on local worker
processes or as Ray tasks (``--ray [ADDRESS]``: a local Ray instance, or the
cluster at ADDRESS). Tasks whose notebook already ended with a final answer
are skipped, so running the same command again resumes an interrupted batch."""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._words import plural
from ..engine.runs import options
from ..engine.runs.options import whole_number
from ..errors import RLMError
from .progress import ProgressBar

if TYPE_CHECKING:
    from .tasks import Task

EXIT_OK, EXIT_SOME_FAILED, EXIT_INTERRUPTED = 0, 1, 130
LOCAL_RAY = "local"


def add_batch_parser(commands: Any) -> None:
    batch = commands.add_parser(
        "batch", help="run an RLM over many tasks (local worker processes or Ray)",
        description="Run one RLM per line of TASKS.jsonl ({\"id\", \"query\", and \"context\": a path or a list "
                    "of paths, or \"context_text\": the context itself}). Each task writes DIR/<id>.ipynb and a "
                    "line of DIR/results.jsonl; tasks whose notebook ended with a final answer are skipped.",
        epilog="exit status: 0 when every task ended with a final answer, 1 when some did not, 2 for a usage "
               "error, 130 when Ctrl-C stopped the batch (run it again to resume).",
    )
    batch.add_argument("tasks", metavar="TASKS.jsonl", help="one task per line")
    batch.add_argument("--out", required=True, metavar="DIR", help="folder for the notebooks and results.jsonl")
    batch.add_argument("--workers", type=whole_number(1), default=None,
                       help="tasks at once (default: the number of CPUs; with --ray ADDRESS: the cluster's CPUs)")
    batch.add_argument("--ray", nargs="?", const=LOCAL_RAY, default=None, metavar="ADDRESS",
                       help="run the tasks as Ray tasks: on a local Ray instance, or on the cluster at ADDRESS "
                            "(ray://HOST:10001, HOST:6379 or auto)")
    batch.add_argument("--quiet", action="store_true", help="no progress on stderr")
    options.add_arguments(batch)


def run_batch(args: argparse.Namespace) -> int:
    # The tasks' notebooks need nbformat, whose import takes a second (jsonschema's
    # format checks): imported here, not for `rlm-kernel --help` or another command.
    from ..builder import check_models
    from .tasks import Results, finished, line_from_notebook, read_tasks

    tasks = read_tasks(args.tasks)
    given = options.given(args)
    if args.ray in (None, LOCAL_RAY):
        check_models(options.resolve(given))  # a bad model or key fails once, here, not in every task
    # (a cluster's nodes may reach servers and hold keys that this machine does not: each task checks there)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RLMError(f"Cannot create the output folder {args.out!r}: {error.strerror or error}.") from None
    results = Results(out)
    todo: list[Task] = []
    for task in tasks:
        if finished(out, task.id):
            if task.id not in results.lines:
                results.lines[task.id] = line_from_notebook(out, task.id)
        else:
            todo.append(task)
    bar = ProgressBar(len(tasks), skipped=len(tasks) - len(todo), stream=None if args.quiet else sys.stderr)
    interrupted = False
    try:
        engine = _ray_runs if args.ray else _local_runs
        for line in engine(todo, given, out, args):
            results.add(line)
            bar.done(line)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        results.rewrite(tasks)
        bar.close()
    if interrupted:
        print(f"rlm-kernel: batch interrupted; run the same command again to resume ({out / 'results.jsonl'}).",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    failed = [t.id for t in tasks if results.lines.get(t.id, {}).get("reason") != "final"]
    if failed and not args.quiet:
        print(f"rlm-kernel: {plural(len(failed), 'task')} ended without a final answer: "
              f"{', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''}", file=sys.stderr)
    return EXIT_SOME_FAILED if failed else EXIT_OK


Runs = Iterator[dict[str, Any]]


def _local_runs(todo: list[Task], given: dict[str, Any], out: Path, args: argparse.Namespace) -> Runs:
    """The tasks on local worker processes (spawned: a fresh interpreter each)."""
    import multiprocessing

    from .tasks import notebook_path
    from .workers import run_task, start_local_worker

    if not todo:
        return
    workers = min(args.workers or os.cpu_count() or 1, len(todo))
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=start_local_worker)
    pending = {pool.submit(run_task, t.as_dict(), given, str(notebook_path(out, t.id))): t for t in todo}
    finished: set[Any] = set()
    try:
        for future, line in _as_finished(pending):
            finished.add(future)
            if line is not None:
                yield line
    except KeyboardInterrupt:
        # The workers got the Ctrl-C too: their runs end "interrupted" and write
        # their notebooks; tasks not started stay to do (a rerun does them).
        for future in pending:
            future.cancel()
        for future in pending:
            if future in finished or future.cancelled():
                continue
            try:
                line = future.result(timeout=30)
            except Exception:  # noqa: BLE001 - what is lost is run again next time
                continue
            if line is not None:
                yield line
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _as_finished(pending: dict[Any, Task]) -> Iterator[tuple[Any, dict[str, Any] | None]]:
    from .tasks import failed_line

    for future in concurrent.futures.as_completed(pending):
        try:
            yield future, future.result()
        except concurrent.futures.process.BrokenProcessPool:
            raise RLMError("A batch worker process died (out of memory?); run the batch again to resume.") from None
        except Exception as error:  # noqa: BLE001 - the task's own failure
            yield future, failed_line(pending[future].id, f"{type(error).__name__}: {error}")


def _ray_runs(todo: list[Task], given: dict[str, Any], out: Path, args: argparse.Namespace) -> Runs:
    """The tasks as Ray tasks, at most ``--workers`` (default: the cluster's
    CPUs) in flight; each returns its notebook, written here."""
    from .ray_tasks import RayRunner
    from .tasks import notebook_path

    if not todo:
        return
    cluster = args.ray != LOCAL_RAY
    with RayRunner(None if not cluster else args.ray, args.workers) as runner:
        for line in runner.run(todo, given, out, check=cluster):
            text = line.pop("_notebook", None)
            if text is not None:
                path = notebook_path(out, line["id"])
                path.write_text(text, encoding="utf-8")
                line["notebook"] = str(path)
            yield line


__all__ = ["add_batch_parser", "run_batch"]
