"""Make the trajectory notebooks kept in tests/files/, with the real engine
(``rlm_kernel.RLM``) against the scripted model server:

    python tests/files/make_fixtures.py [--out DIR]

- ``finished.ipynb``: a run that ends with an answer: prose, code with an
  ``llm_query_batched`` over the reviews in reviews.txt, a count, FINAL_VAR.
- ``pinned.ipynb``: the same run after a person edited and pinned, in its
  sub-call widget, the response the sub-model got wrong, with a rewritten
  prompt (``pinned: true``, ``edited_prompt``). The pin is made as the RLM
  kernel makes it (``KernelSession.pin`` -> ``ReplayBook.pin`` on the cell's
  recorded sub-calls) and merged into the cell's ``rlm`` metadata as the
  labextension merges the ``cell_metadata`` op it is sent.
- ``child_run.ipynb``: a run whose code called ``rlm_query``: the sub-call's
  record carries the child run (``child``, with its cells).
- ``resumed.ipynb``: ``finished.ipynb`` resumed after its first code cell
  (``RLM.resume``, as ``rlm-kernel run --resume`` does) with a new second
  step: the old continuation stays below it, marked ``superseded``, with its
  recorded outputs (the history that Run All must not run again).

Every model call reports fixed token counts, and the values that change
from one run to the next (run and cell ids, timestamps, latencies,
durations, the scripted server's port, the package version) are replaced
by fixed ones of the same shape, so that making the files again changes
them only when what the engine writes changes. tests/test_fixture_notebooks.py
makes them again and compares; when the format changed on purpose, run this
script and commit the new files.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the tests' helpers
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import nbformat  # noqa: E402
from _helpers import ROOT, SUB, Router, repl  # noqa: E402

from rlm_kernel import RLM  # noqa: E402
from rlm_kernel.engine.trajectory.records import prompt_hash  # noqa: E402
from rlm_kernel.engine.trajectory.replay import ReplayBook  # noqa: E402
from rlm_kernel.testing.server import Reply, ScriptedServer  # noqa: E402

NAMES = ("finished.ipynb", "pinned.ipynb", "child_run.ipynb", "resumed.ipynb")
CONTEXT_FILE = "reviews.txt"
CHILD = "openai/child-model"

QUESTION = "How many reviews complain about delivery?"
ASK = "Does this review complain about delivery? Answer yes or no.\nReview: {}"
FINISHED_ROOT = [
    repl("reviews = context.strip().splitlines()\n"
         f"verdicts = llm_query_batched([{ASK!r}.format(r) for r in reviews])\nprint(verdicts)",
         prose="One sub-call per review, all at once."),
    repl("complaints = sum(v == 'yes' for v in verdicts)\nprint(complaints)", prose="Count the yes answers."),
    "Done.\nFINAL_VAR(complaints)",
]
# The sub-model misses the review about the courier; the person pins "yes" for it.
MISSED = "The courier left it in the rain"
PINNED_RESPONSE = "yes"
EDITED_ASK = ("Does this review complain about delivery (late, lost, damaged, or left out by the courier)? "
              "Answer yes or no.\nReview: {}")

CHILD_QUESTION = "How many reviews mention the courier or the parcel?"
CHILD_ROOT = [
    repl("count = rlm_query('Count the reviews that mention the courier or the parcel.', "
         f"model={CHILD!r}, context=context)\nprint('the child counted', count)",
         prose="A child run counts them."),
    "FINAL_VAR(count)",
]
CHILD_STEPS = [
    repl("hits = [r for r in context.splitlines() if 'courier' in r or 'parcel' in r]\nfound = len(hits)\n"
         "print(found)", prose="Look for the two words."),
    "FINAL_VAR(found)",
]

# The resumed run's new second step: it recounts, differently, then answers.
RESUMED_ROOT = [
    repl("complaints = len([v for v in verdicts if v.strip().lower() == 'yes'])\nprint('recounted', complaints)",
         prose="Count again, allowing for stray spaces."),
    "FINAL_VAR(complaints)",
]

# Fixed usage for every call, so token counts do not follow the prompts' wording.
ROOT_TOKENS = {"prompt_tokens": 1200, "completion_tokens": 40}
SUB_TOKENS = {"prompt_tokens": 30, "completion_tokens": 1}


def review_of(prompt: str) -> str:
    return prompt.rsplit("Review: ", 1)[-1]


def sub_model(prompt: str) -> Reply:
    review = review_of(prompt).lower()
    verdict = "yes" if any(word in review for word in ("late", "lost", "torn", "parcel")) else "no"
    return Reply(text=verdict, **SUB_TOKENS)


def with_usage(items: list[str]) -> list[Any]:
    return [Reply(text=item, **ROOT_TOKENS) for item in items]


def run(folder: Path, name: str, scripts: dict[str, list[str]], query: str) -> dict[str, Any]:
    """One run on the scripted models: its notebook, as the engine wrote it."""
    context = (HERE / CONTEXT_FILE).read_text(encoding="utf-8")
    responder = Router({model: with_usage(items) for model, items in scripts.items()},
                       sub=sub_model)
    path = folder / name
    with ScriptedServer(responder) as server:
        result = RLM(model=ROOT, sub_model=SUB, api_base=server.url, retry_base_delay=0.01).completion(
            context, query, output=path, sources=[CONTEXT_FILE])
    if result.reason != "final":
        raise SystemExit(f"{name}: the scripted run ended with {result.reason!r}: {result.error}")
    return json.loads(path.read_text(encoding="utf-8"))


def resume(folder: Path, name: str, source: str, from_role: str, from_step: int) -> dict[str, Any]:
    """The run saved as ``source`` resumed after its cell of ``from_role`` in
    ``from_step`` (its context file read from beside it, as when a person
    resumes it); the new notebook as the engine wrote it."""
    (folder / CONTEXT_FILE).write_bytes((HERE / CONTEXT_FILE).read_bytes())
    nb = json.loads((folder / source).read_text(encoding="utf-8"))
    upto = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("rlm", {}).get("role") == from_role
                and c["metadata"]["rlm"].get("step") == from_step)
    path = folder / name
    with ScriptedServer(Router({"root-model": with_usage(RESUMED_ROOT)}, sub=sub_model)) as server:
        result = RLM(model=ROOT, sub_model=SUB, api_base=server.url, retry_base_delay=0.01).resume(
            folder / source, from_cell=upto, output=path)
    if result.reason != "final":
        raise SystemExit(f"{name}: the scripted resume ended with {result.reason!r}: {result.error}")
    return json.loads(path.read_text(encoding="utf-8"))


def pin(nb: dict[str, Any]) -> None:
    """Pin "yes" for the review the sub-model got wrong, with a rewritten
    prompt, as a person does in the sub-call widget."""
    [review] = [line for line in (HERE / CONTEXT_FILE).read_text(encoding="utf-8").splitlines() if MISSED in line]
    [cell] = [c for c in nb["cells"] if c["metadata"].get("rlm", {}).get("subcalls")]
    # the notebook keeps a prompt's hash and a short preview: the hash finds the record
    [record] = [r for r in cell["metadata"]["rlm"]["subcalls"]
                if r["prompt_hash"] == prompt_hash(SUB, ASK.format(review))]
    book = ReplayBook.from_cells(nb["cells"])
    edited = EDITED_ASK.format(review)
    assert book.pin(cell["id"], record["id"], PINNED_RESPONSE, edited) is not None
    cell["metadata"]["rlm"] = {**cell["metadata"]["rlm"], "subcalls": book.cells[cell["id"]]}


# -- fixed values in place of those that change from run to run -----------------------

SECONDS = ("latency_s", "duration_s", "elapsed_s")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?$")
PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
TIME_IN_TEXT = re.compile(r"\b\d+(\.\d+)? s\b")  # "0.04 s" in a sub-call view's table
MADE_IN = re.compile(r"\S*rlm-fixtures-[^/\\]+[/\\]")  # the folder make() works in: a resumed run's context file


def stabilise(nb: dict[str, Any]) -> dict[str, Any]:
    """A copy of the notebook with fixed values for the volatile ones."""
    data = copy.deepcopy(nb)
    ids: dict[str, str] = {}
    runs, cells = itertools.count(1), itertools.count(1)

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if "cell_type" in node and isinstance(node.get("id"), str) and node["id"] not in ids:
                ids[node["id"]] = f"{next(cells):016x}"
            run_id = node.get("run_id")
            if isinstance(run_id, str) and run_id and run_id not in ids:
                ids[run_id] = f"{next(runs):012x}"
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(data)
    batches: dict[str, str] = {}  # "b<n>" counts batches across the process: number them per notebook
    known = re.compile("|".join(sorted(map(re.escape, ids), key=len, reverse=True))) if ids else None

    def fix(node: Any, key: str | None = None, view: bool = False) -> Any:
        if isinstance(node, dict):
            view = view or bool((node.get("metadata") or {}).get("rlm", {}).get("subcall_view"))
            return {k: fix(v, k, view) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v, key, view) for v in node]
        if key in SECONDS and isinstance(node, (int, float)) and not isinstance(node, bool):
            return 0.5
        if isinstance(node, str):
            if key == "batch":
                return batches.setdefault(node, f"b{len(batches) + 1}")
            if key == "version":
                return "0.0.0"
            if TIMESTAMP.match(node):
                return "2025-01-01T00:00:00Z"
            node = PORT.sub(r"\1:8000", node)
            node = MADE_IN.sub("", node)
            if known is not None:
                node = known.sub(lambda m: ids[m.group()], node)
            if view:
                node = TIME_IN_TEXT.sub("0.5 s", node)
        return node

    return fix(data)


def write(nb: dict[str, Any], path: Path) -> None:
    """As the engine writes a trajectory (rlm_kernel.sinks.notebook.write_notebook)."""
    nbformat.validate(nbformat.from_dict(nb))
    path.write_text(json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def make(out: Path) -> list[Path]:
    """Make every fixture notebook into ``out``; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlm-fixtures-") as tmp:
        folder = Path(tmp)
        finished = run(folder, "finished.ipynb", {"root-model": FINISHED_ROOT}, QUESTION)
        child = run(folder, "child_run.ipynb", {"root-model": CHILD_ROOT, "child-model": CHILD_STEPS}, CHILD_QUESTION)
        resumed = resume(folder, "resumed.ipynb", "finished.ipynb", "code", 1)
    pinned = copy.deepcopy(finished)
    pin(pinned)
    made = []
    for name, nb in zip(NAMES, (finished, pinned, child, resumed), strict=True):
        write(stabilise(nb), out / name)
        made.append(out / name)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write them to (default: tests/files)")
    args = parser.parse_args()
    for path in make(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
