"""``rlm-kernel import LOG -o run.ipynb``: another library's run (an
``rlms`` JSONL log, a ``dspy.RLM`` trajectory) as a trajectory notebook
that opens in JupyterLab, replays and continues with our engine."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import RLMError

FORMATS = ("rlms", "dspy")


def add_import_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "import", help="open another library's run as a trajectory notebook (rlms JSONL logs, dspy.RLM trajectories)",
        description="Write the run in LOG (an rlms JSONL log, or a JSON dump of a dspy.RLM prediction's "
                    "trajectory) as a trajectory notebook: steps as prose and code cells with their outputs, "
                    "sub-calls as records, child runs nested. Continue it with `rlm-kernel run --resume NB "
                    "--context PATH` or `%rlm continue` in JupyterLab.",
    )
    parser.add_argument("log", metavar="LOG", help="the log or trajectory file")
    parser.add_argument("-o", "--output", help="notebook to write (default: LOG's name with .ipynb)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="rlms or dspy (default: from the file: JSON lines are an rlms log)")
    parser.add_argument("--query", help="the question, when the log does not say it")
    parser.add_argument("--model", help="the root model as a litellm name, when the log does not say it (dspy)")
    parser.add_argument("--sub-model", help="the sub-model as a litellm name, when the log does not say it")


def run_import(args: argparse.Namespace) -> int:
    import nbformat

    from .dspy_trajectory import read_trajectory
    from .imported import notebook
    from .rlms_log import read_log

    if not os.path.isfile(args.log):
        raise RLMError(f"No such file: {args.log!r}.")
    kind = args.format or _sniff(args.log)
    if kind == "rlms":
        run = read_log(args.log, query=args.query)
        if args.model:
            run.model = args.model
        if args.sub_model:
            run.sub_model = args.sub_model
    else:
        run = read_trajectory(args.log, query=args.query, model=args.model, sub_model=args.sub_model)
    output = args.output or str(Path(args.log).with_suffix(".ipynb"))
    note = (f"*Imported from {'an rlms log' if kind == 'rlms' else 'a dspy.RLM trajectory'} "
            f"(`{os.path.basename(args.log)}`), which does not keep the context: give it with "
            "`rlm-kernel run --resume THIS.ipynb --context PATH`, or set `context` before re-running.*")
    made = notebook(run, note)
    try:
        nbformat.write(made, output)
    except OSError as error:
        raise RLMError(f"Cannot write {output!r}: {error.strerror or error}.") from None
    calls = made.metadata["rlm"]["runs"][0]["subcalls"]
    print(f"rlm-kernel: wrote {output}: {len(run.steps)} steps, {calls} sub-calls, ended {run.reason}.",
          file=sys.stderr)
    return 0


def _sniff(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline().strip()
    return "rlms" if first.startswith("{") and '"type"' in first and first.endswith("}") else "dspy"


__all__ = ["add_import_parser", "run_import"]
