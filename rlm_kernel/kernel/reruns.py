"""Is a cell's run already in the notebook below it? A re-run ``%%rlm`` cell
(Run All, or by hand) and a re-run ``%rlm continue`` cell replay what they
made instead of asking the model again."""

from __future__ import annotations

from typing import Any

from ..engine.trajectory.cells import AGENT_ROLES, find_cell, rlm_meta


def recorded_run_below(cells: list[dict[str, Any]] | None, cell_id: str | None,
                       source: str) -> tuple[str, int] | None:
    """(run id, number of cells) when the notebook (``cells``, as it is now)
    holds a run of this ``%%rlm`` cell right below it: the newest one, as a
    run's cells go right below its query cell."""
    if not cells:
        return None
    index = find_cell(cells, cell_id, source)
    if index is None:
        return None
    run_id, count = None, 0
    for cell in cells[index + 1:]:
        meta = rlm_meta(cell)
        if meta.get("role") not in AGENT_ROLES:
            break
        if run_id is None:
            run_id = meta.get("run_id")
        if meta.get("run_id") != run_id:
            break
        count += 1
    return (run_id, count) if run_id and count else None


def continuation_below(cells: list[dict[str, Any]], cell_id: str | None) -> tuple[str, int, bool] | None:
    """(run id, number of cells, superseded) when the continuation that the
    ``%rlm continue`` cell ``cell_id`` made is in the notebook below it."""
    index = find_cell(cells, cell_id) if cell_id else None
    if index is None:
        return None
    mark = rlm_meta(cells[index])
    first, run_id = mark.get("continuation"), mark.get("run_id")
    if not first or not run_id:
        return None
    start = next((i for i in range(index + 1, len(cells)) if cells[i].get("id") == first), None)
    if start is None:
        return None
    count = 0
    for cell in cells[start:]:
        meta = rlm_meta(cell)
        if meta.get("role") not in AGENT_ROLES or meta.get("run_id") != run_id:
            break
        count += 1
    return run_id, count, bool(rlm_meta(cells[start]).get("superseded"))


__all__ = ["continuation_below", "recorded_run_below"]
