"""Exporting a trajectory notebook: ``rlm-kernel export NB.ipynb --format F -o OUT``.

Formats: ``rlms-jsonl`` (the official ``rlms`` library's log, one file per
run), ``sft`` (chat-format JSONL for fine-tuning) and ``markdown`` (a
readable report). Each lives in its own module; this one loads the notebook,
picks the runs and writes the result.

Run filters, for every format: ``run_id`` (one run), ``only_final`` (runs
that ended with a final answer) and ``only_approved`` (runs whose every
step with code was approved by a person: each of its code cells carries
``metadata.rlm.approved: true``, which the approval flow writes; a run with
no code has nothing approved).

Exports hold no credentials we can recognise: metadata keys that name one
(``api_key``, ``token``, ...) are not copied, and the written text goes
through ``errors.redact``: the values of secret environment variables and
of keys given in code, strings shaped like a provider's key (``AIza...``,
``sk-...``, ``hf_...``, ...), ``Bearer`` headers and long random-looking
values assigned to a credential name are replaced.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..errors import RLMError
from ..redaction import redact
from .runs import RunView, count, read_runs, select_runs

FORMATS = ("rlms-jsonl", "sft", "markdown")


class ExportError(RLMError):
    """A notebook cannot be exported as asked."""


@dataclass
class ExportResult:
    paths: list[str]  # files written ("-" for standard output)
    runs: int
    items: int  # iterations (rlms-jsonl), examples (sft), steps (markdown)
    notes: list[str] = field(default_factory=list)


def load_notebook(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read an .ipynb file as an nbformat v4 notebook (plain JSON; older
    versions are converted); bad input is an ExportError."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExportError(f"No such notebook: {name!r}.") from None
    except IsADirectoryError:
        raise ExportError(f"{name!r} is a directory; give the path of an .ipynb file.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ExportError(f"Cannot read {name!r}: {getattr(error, 'strerror', None) or error}.") from None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise ExportError(f"{name!r} is not a Jupyter notebook (an .ipynb JSON file with cells).")
    if data.get("nbformat") == 4:
        if not all(isinstance(c, dict) for c in data["cells"]) or not isinstance(data.get("metadata", {}), dict):
            raise ExportError(f"{name!r} is not a readable Jupyter notebook (its cells or metadata are malformed).")
        _check_format(data, name)
        return data  # importing nbformat costs seconds; a v4 file is read as it is
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises several kinds for a malformed notebook
        raise ExportError(f"{name!r} is not a readable Jupyter notebook ({str(error).splitlines()[0]}).") from None
    _check_format(nb, name)
    return nb


def _check_format(nb: Any, name: str) -> None:
    from ..engine.trajectory.schema import check_readable

    try:
        check_readable(nb, repr(name))
    except RLMError as error:
        raise ExportError(str(error)) from None


def export_notebook(
    path: str | os.PathLike[str],
    fmt: str,
    output: str | os.PathLike[str] | None = None,
    *,
    run_id: str | None = None,
    include_subcalls: bool = False,
    only_final: bool = False,
    only_approved: bool = False,
    stdout: TextIO | None = None,
) -> ExportResult:
    """Export the runs of the notebook at ``path`` as ``fmt`` to ``output``
    (a file; None or ``"-"``: ``stdout``)."""
    if fmt not in FORMATS:
        raise ExportError(f"Unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}.")
    if include_subcalls and fmt != "sft":
        raise ExportError("--include-subcalls applies only to --format sft.")
    nb = load_notebook(path)
    name = Path(path).name
    runs = read_runs(nb, name)
    if not runs:
        raise ExportError(f"{str(path)!r} holds no RLM runs (no cells with `rlm` metadata from %%rlm or "
                          "rlm-kernel run).")
    if run_id and all(r.run_id != run_id for r in runs):
        raise ExportError(f"No run {run_id!r} in {name}; its runs are: {', '.join(r.run_id for r in runs)}.")
    kept, notes = select_runs(runs, run_id=run_id, only_final=only_final, only_approved=only_approved)
    if not kept and fmt != "sft":
        raise ExportError(f"No run in {name} passes the filters ({'; '.join(notes)}).")
    target = None if output in (None, "-") else str(output)
    out = stdout or sys.stdout
    if fmt == "rlms-jsonl":
        return _rlms_jsonl(kept, target, out, notes)
    if fmt == "sft":
        from . import sft

        lines, more = sft.examples(kept, include_subcalls=include_subcalls, only_final=only_final)
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        return ExportResult([_write(text, target, out)], len(kept), len(lines), notes + more)
    from . import markdown

    text = markdown.render(kept, name)
    return ExportResult([_write(text, target, out)], len(kept), sum(len(r.steps) for r in kept), notes)


def run_export(args: Any) -> int:
    """``rlm-kernel export``: write the export, say what was written on stderr."""
    result = export_notebook(
        args.notebook, args.format, args.output, run_id=args.run, include_subcalls=args.include_subcalls,
        only_final=args.only_final, only_approved=args.only_approved,
    )
    unit = {"rlms-jsonl": "iteration", "sft": "example", "markdown": "step"}[args.format]
    where = ", ".join("standard output" if p == "-" else p for p in result.paths)
    print(f"rlm-kernel: exported {count(result.runs, 'run')}, {count(result.items, unit)}, to {where}", file=sys.stderr)
    for note in result.notes:
        print(f"rlm-kernel: left out {note}", file=sys.stderr)
    return 0


def _rlms_jsonl(runs: list[RunView], target: str | None, out: TextIO, notes: list[str]) -> ExportResult:
    from . import rlms_jsonl

    if target is None and len(runs) > 1:
        raise ExportError(f"The notebook holds {len(runs)} runs and the rlms log is one file per run; "
                          "pick one with --run ID or give -o PATH (one file per run beside it).")
    names = rlms_jsonl.file_names(target, runs) if target else [None]
    paths = [_write(rlms_jsonl.render_run(run), name, out) for run, name in zip(runs, names, strict=True)]
    return ExportResult(paths, len(runs), sum(len(r.steps) for r in runs), notes)


def _write(text: str, target: str | None, out: TextIO) -> str:
    text = redact(text)
    if target is None:
        out.write(text)
        out.flush()
        return "-"
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as error:
        raise ExportError(f"Cannot write {target!r}: {error.strerror or error}.") from None
    return target


__all__ = ["FORMATS", "ExportError", "ExportResult", "export_notebook", "load_notebook"]
