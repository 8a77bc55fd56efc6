"""Follow-up questions: a run that builds on earlier runs of the same
session (a later ``%%rlm`` in the kernel, ``rlm-kernel run --resume NB
--query TEXT``, ``RLM.completion(..., follow_up=result)``).

Its root model is told the earlier runs' queries, their answers (head and
tail when long) and the variables they left (names, types, sizes; the ones
still in the namespace), in its first user message. Its cells carry
``metadata.rlm.follows``: the id of the run it follows (the latest earlier
one), so a notebook and the runs panel show the chain.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._words import plural
from ..protocol.reply import truncate_middle
from ..trajectory.cells import is_query_cell, rlm_meta, source
from ..trajectory.writing import answer_from_markdown, answer_text
from .options import parse_query_cell

SHOWN_RUNS = 5  # the newest earlier runs told in full; older ones are counted
ANSWER_CHARS = 2_000  # of each earlier answer: head and tail when longer
QUERY_CHARS = 1_000
SHOWN_VARIABLES = 25  # per run


@dataclass
class EarlierRun:
    run_id: str
    query: str
    reason: str  # how it ended (final, max_iterations, ...)
    answer: str | None = None  # its answer's text, when it gave one
    answer_var: str | None = None
    names: list[str] = field(default_factory=list)  # the variables its code bound, in order
    answer_chars: int | None = None  # the whole answer's length, when `answer` is the answer cell's preview

    def answer_told(self, namespace: Mapping[str, Any]) -> str:
        """Its answer, whole: a preview from an answer cell is completed from
        the variable that held it, when the namespace still has it."""
        text = self.answer or ""
        if self.answer_chars is None or len(text) >= self.answer_chars:
            return text
        if self.answer_var and self.answer_var in namespace:
            return answer_text(namespace[self.answer_var])
        return f"{text}\n[... {self.answer_chars - len(text):,} more characters, not kept in the notebook ...]"


def names_bound(code: str) -> list[str]:
    """The names a cell's code binds at the top level of the namespace
    (assignments, loops, with, imports, defs, walrus), in order."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # IPython syntax (magics, !shell): read the lines that are Python
        kept = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
        try:
            tree = ast.parse(kept)
        except SyntaxError:
            return []
    found: list[str] = []

    def add(name: str) -> None:
        if name not in found:
            found.append(name)

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for item in node.elts:
                targets(item)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(node.name)
            return  # its body binds names of its own
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets(target)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets(node.optional_vars)
        elif isinstance(node, ast.NamedExpr):
            targets(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                add(alias.asname or alias.name.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def run_names(cells: Iterable[Any], run_id: str) -> list[str]:
    """The names bound by a run's code cells that ran."""
    names: list[str] = []
    for cell in cells:
        meta = rlm_meta(cell)
        if (cell.get("cell_type") != "code" or meta.get("role") != "code" or meta.get("run_id") != run_id
                or meta.get("status") == "skipped" or meta.get("superseded")):
            continue
        names += [n for n in names_bound(source(cell)) if n not in names]
    return names


def from_run(run: Any, result: Any) -> EarlierRun:
    """A run of this session, once it ended (``run``: an engine Run, ``result`` its RunResult)."""
    answer = result.answer_text if result.reason == "final" else None
    return EarlierRun(run.run_id, run.query, result.reason, answer, result.answer_var, run_names(run.cells, run.run_id))


def earlier_runs_in(cells: Sequence[Any], records: Sequence[Mapping[str, Any]] = ()) -> list[EarlierRun]:
    """The runs recorded in a notebook's cells, in order: each one's query
    (its ``%%rlm`` cell, else the notebook's record of it), its answer (its
    answer cell) and the names its code bound."""
    queries = {str(r.get("run_id")): str(r.get("query") or "") for r in records if r.get("run_id")}
    runs: dict[str, EarlierRun] = {}
    last_query = ""
    for cell in cells:
        meta = rlm_meta(cell)
        if is_query_cell(cell):
            try:
                last_query = parse_query_cell(source(cell))[0]
            except Exception:  # noqa: BLE001 - a query cell with unreadable flags still has its text
                last_query = source(cell).partition("\n")[2].strip()
        run_id = meta.get("run_id")
        if not run_id or meta.get("role") not in ("query", "thought", "code", "answer"):
            continue
        run = runs.get(run_id)
        if run is None:
            query = last_query if meta.get("role") != "query" else parse_query_cell(source(cell))[0]
            run = runs[run_id] = EarlierRun(run_id, queries.get(run_id) or query, "running")
        if meta.get("role") == "answer" and not meta.get("superseded"):
            run.reason = str(meta.get("reason") or "final")
            run.answer_var = meta.get("answer_var")
            if run.reason == "final":
                body = source(cell).partition("\n\n")[2]
                run.answer = answer_from_markdown(body, meta.get("answer_format"), meta.get("answer_chars"))
                run.answer_chars = meta.get("answer_chars")
    for run in runs.values():
        run.names = run_names(cells, run.run_id)
    return list(runs.values())


def recorded_follow_up(cells: Sequence[Any], query_index: int) -> FollowUp | None:
    """What a recorded follow-up (its query cell says which run it follows)
    built on: the runs above its query cell. None for any other run."""
    if not rlm_meta(cells[query_index]).get("follows"):
        return None
    earlier = earlier_runs_in(cells[:query_index])
    return FollowUp(earlier) if earlier else None


@dataclass
class FollowUp:
    """The earlier runs a follow-up builds on (oldest first)."""

    earlier: list[EarlierRun]

    @property
    def follows(self) -> str:
        return self.earlier[-1].run_id

    def describe(self, namespace: Mapping[str, Any], skip: Iterable[str] = ()) -> str:
        """What the root model is told about the earlier runs; ``skip``: the
        run's own entries (helpers, tools), never listed as variables."""
        skip = set(skip)
        shown = self.earlier[-SHOWN_RUNS:]
        owner: dict[str, str] = {}  # a name two runs bound is the later one's
        for run in self.earlier:
            for name in run.names:
                owner[name] = run.run_id
        older = len(self.earlier) - len(shown)
        parts = ["This is a follow-up question. Earlier runs in this session asked what is below, and the "
                 "variables they left are still in the session: build on them (reuse a variable rather than "
                 "compute it again) where they help."
                 + (f" ({plural(older, 'older run')} not shown.)" if older else "")]
        for number, run in enumerate(shown, len(self.earlier) - len(shown) + 1):
            lines = [f"Earlier run {number} of {len(self.earlier)} (run {run.run_id}):",
                     f"Query: {truncate_middle(run.query, QUERY_CHARS)}"]
            if run.answer is not None:
                via = f" (the value of `{run.answer_var}`)" if run.answer_var else ""
                lines.append(f"Answer{via}: {truncate_middle(run.answer_told(namespace), ANSWER_CHARS)}")
            else:
                lines.append(f"It ended without an answer (reason: {run.reason}).")
            left = [n for n in run.names if owner.get(n) == run.run_id and n not in skip and _is_variable(n, namespace)]
            if left:
                more = len(left) - SHOWN_VARIABLES
                listed = ", ".join(describe_variable(n, namespace[n]) for n in left[:SHOWN_VARIABLES])
                lines.append(f"Variables it left: {listed}" + (f" and {more:,} more." if more > 0 else "."))
            else:
                lines.append("It left no variables.")
            parts.append("\n".join(lines))
        return "\n\n".join(parts)


def _is_variable(name: str, namespace: Mapping[str, Any]) -> bool:
    if name.startswith("_") or name not in namespace:
        return False
    value = namespace[name]
    return type(value).__name__ != "module" and getattr(builtins, name, None) is not value


def describe_variable(name: str, value: Any) -> str:
    """``name`` (type, size): what the root model is told of a variable."""
    kind = type(value).__name__
    if isinstance(value, bool) or isinstance(value, (int, float)) and abs(value) < 1e15:
        return f"`{name}` ({kind}: {value!r})"
    if isinstance(value, (str, bytes)):
        return f"`{name}` ({kind}, {plural(len(value), 'character' if isinstance(value, str) else 'byte')})"
    try:
        size = len(value) if not isinstance(value, type) else None
    except Exception:  # noqa: BLE001 - a __len__ that fails says nothing about the value
        size = None
    return f"`{name}` ({kind}" + (f", {plural(size, 'item')})" if size is not None else ")")

__all__ = ["EarlierRun", "FollowUp", "describe_variable", "earlier_runs_in", "from_run", "names_bound",
           "recorded_follow_up", "run_names"]
