"""``%rlm continue [--from CELL]``: rebuild the root model's history from
the notebook as it is now (a person's edits, notes and pins included) and go
on below the continue cell, keeping or removing the old continuation."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from .._words import plural
from ..engine.runs import options
from ..engine.runs.options import new_parser
from ..engine.trajectory.cells import AGENT_ROLES, cell_with_source, rlm_meta
from ..errors import RLMError
from .cell_runs import CellRun, person_namespace
from .reruns import continuation_below


def continue_parser() -> argparse.ArgumentParser:
    parser = new_parser("%rlm continue", "Continue a run from a cell, with the notebook as it is now.")
    parser.add_argument("--from", dest="from_cell", metavar="CELL",
                        help="cell id or index to continue after (default: the cell above this one)")
    parser.add_argument("--old", choices=("keep", "remove"), default="keep",
                        help="the old continuation's agent cells: keep them (marked superseded) or remove them")
    parser.add_argument("--approve", action="store_true", help="ask before each generated code cell runs")
    parser.add_argument("--fresh", action="store_true",
                        help="continue again even when this cell's continuation is in the notebook below")
    options.add_arguments(parser)
    return parser


async def prepare_continue(shell: Any, line: str, sources: list[str] | None,
                           clients: Any = None, earlier: Any = None) -> CellRun | None:
    """The continued run, or None when this cell's continuation is already below it."""
    from ..engine.runs.history import rebuild
    from ..resume import step_images

    args = continue_parser().parse_args(shlex.split(line))
    session = shell.kernel.rlm_session
    here = ((shell.kernel.get_parent("shell") or {}).get("metadata") or {}).get("cellId")
    page = await session.ask_page()
    cells = page if page is not None else session.saved_cells()
    if not cells:
        raise RLMError("Continue needs the notebook's cells: open it in JupyterLab with the rlm-kernel "
                       "extension, or save it first.")
    here = here or cell_with_source(cells, f"%rlm continue {line}".rstrip())
    if not args.fresh:
        made = continuation_below(cells, here)
        if made is not None:
            run_id, count, superseded = made
            print(f"This cell's continuation of run {run_id} ({plural(count, 'cell')}"
                  f"{', since superseded' if superseded else ''}) is already in the notebook below: run those "
                  "cells to replay it with its recorded sub-calls (Run All does). "
                  "Add --fresh to ask the model again.")
            return None
    upto = cell_index(cells, args.from_cell, here)
    namespace = person_namespace(shell)
    if "context" not in namespace:
        raise RLMError("No context yet: run the cell that loads `context` first.")
    rebuilt = rebuild(cells, upto, namespace["context"], sources=sources,
                      view_limit=args.max_output_chars or 10_000)
    old = [c.get("id") for c in cells[upto + 1:]
           if rlm_meta(c).get("run_id") == rebuilt.run_id and rlm_meta(c).get("role") in AGENT_ROLES
           and not rlm_meta(c).get("superseded")]
    if old:
        if args.old == "remove":
            session.send("delete_cells", cell_ids=old)
        else:
            session.send("cell_metadata", cell_ids=old, rlm={"superseded": True})
    # The new steps go right below this cell: move what lies between the
    # chosen cell and this one (the old continuation, kept) below it, so
    # the notebook reads: cells up to the chosen one, this cell, the new
    # steps, then the old continuation.
    between = cells_between(cells, upto, here, dropped=set(old) if args.old == "remove" else set())
    if between:
        session.send("move_cells", cell_ids=between, after_cell_id=here)
    given = {**rebuilt.options, **options.given(args)}
    images = step_images(options.resolve(given))
    if images is not None:  # the root model takes images: the steps' feedback carries them again
        rebuilt = rebuild(cells, upto, shell.user_ns["context"], sources=sources,
                          view_limit=args.max_output_chars or 10_000, images=images)
    pins = sum(1 for c in cells[rebuilt.query_index + 1:upto + 1] if not rlm_meta(c).get("superseded")
               for r in rlm_meta(c).get("subcalls") or [] if r.get("pinned"))
    print(f"Continuing run {rebuilt.run_id} from cell {upto} (step {rebuilt.next_step}; "
          f"{plural(rebuilt.interventions, 'change')} by you; "
          + (f"{plural(pins, 'pinned sub-call response')}; " if pins else "") +
          f"{plural(len(old), 'old cell')} {'removed' if args.old == 'remove' else 'kept, marked superseded'}"
          + (f"; {plural(len(between), 'cell')} moved below the new steps" if between else "")
          + ").")
    return CellRun(shell, "", rebuilt.query, sources=sources, given=given, approve=args.approve,
                   continued=rebuilt, anchor=here, clients=clients, page_cells=page, earlier=earlier)


def cells_between(cells: list[Any], upto: int, here: str | None, dropped: set[str]) -> list[str]:
    """Ids of the cells after cell ``upto`` and before the continue cell
    ``here`` (none when it is not below cell ``upto``), less ``dropped``."""
    ids = [c.get("id") for c in cells]
    if not here or here not in ids or ids.index(here) <= upto:
        return []
    return [i for i in ids[upto + 1:ids.index(here)] if i and i not in dropped]


def cell_index(cells: list[Any], wanted: str | None, here: str | None) -> int:
    """The index of the cell to continue after: ``wanted`` (an id or an index),
    else the cell above ``here`` (this %rlm continue cell), else the last cell."""
    if wanted is not None:
        if wanted.lstrip("-").isdigit():
            index = int(wanted)
            if not -len(cells) <= index < len(cells):
                raise RLMError(f"There is no cell {index}: the notebook has {plural(len(cells), 'cell')}.")
            return index % len(cells)
        for index, cell in enumerate(cells):
            if cell.get("id") == wanted:
                return index
        raise RLMError(f"There is no cell with id {wanted!r} in this notebook.")
    for index, cell in enumerate(cells):
        if here and cell.get("id") == here:
            if index == 0:
                raise RLMError("There is no cell above this one to continue from.")
            return index - 1
    return len(cells) - 1


__all__ = ["cell_index", "cells_between", "continue_parser", "prepare_continue"]
