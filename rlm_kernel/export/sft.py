"""``--format sft``: chat-format JSONL for fine-tuning a model to act as an
RLM root model (the paper fine-tuned one on 1,000 filtered trajectories).

One JSON object per line: ``{"messages": [...], "metadata": {...}}``. A
run's messages are exactly the history the root model would get if the run
went on from its notebook now (``engine.history.rebuild``): the system
prompt, the first message (the context described, the query), then its
replies and the feedback on them, with a person's edits and added cells
honoured; the example ends with the run's last reply.

``include_subcalls`` adds one example per sub-call: an ``llm_query`` as a
user prompt and the assistant's response (only when the notebook holds the
whole prompt: it keeps a 160-character preview of longer ones, so those are
skipped and counted), an ``rlm_query`` child run as a root-model example of
its own. Failed sub-calls are skipped. Run filters (only final answers, only
human-approved steps) are applied by the caller (``runs.select_runs``);
``only_final`` here also drops child runs that ended without an answer.
"""

from __future__ import annotations

from typing import Any

from .runs import RunView, count, prompt_of


def examples(runs: list[RunView], *, include_subcalls: bool = False,
             only_final: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The training examples of ``runs``, and notes on what was left out."""
    out: list[dict[str, Any]] = []
    skipped = {"preview": 0, "failed": 0, "child": 0, "empty": 0}
    for run in runs:
        _add_run(run, out, skipped)
        if include_subcalls:
            _add_subcalls(run, out, skipped, only_final)
    notes = []
    if skipped["empty"]:
        notes.append(f"{count(skipped['empty'], 'run')} with no reply from the root model")
    if skipped["preview"]:
        notes.append(f"{count(skipped['preview'], 'sub-call')} whose whole prompt the notebook does not keep "
                     "(only a preview)")
    if skipped["failed"]:
        notes.append(f"{count(skipped['failed'], 'failed sub-call')}")
    if skipped["child"]:
        notes.append(f"{count(skipped['child'], 'child run')} that ended without a final answer")
    return out, notes


def _add_run(run: RunView, out: list[dict[str, Any]], skipped: dict[str, int]) -> None:
    messages = run.conversation()
    if not any(m["role"] == "assistant" for m in messages):
        skipped["empty"] += 1
        return
    metadata: dict[str, Any] = {
        "run_id": run.run_id, "notebook": run.notebook, "reason": run.reason, "kind": "run",
        "depth": run.depth, "model": run.model, "steps": len(run.steps), "approved": run.approved,
        "answer_var": run.answer_var, "first_message": run.first_message_source,
    }
    if run.subcall is not None:
        metadata["subcall_id"] = run.subcall.get("id")
    out.append({"messages": messages, "metadata": metadata})


def _add_subcalls(run: RunView, out: list[dict[str, Any]], skipped: dict[str, int], only_final: bool) -> None:
    for step, record in run.subcalls():
        child = run.child(record)
        if child is not None:
            if only_final and child.reason != "final":
                skipped["child"] += 1
                continue
            _add_run(child, out, skipped)
            _add_subcalls(child, out, skipped, only_final)
            continue
        if record.get("status") != "done" or record.get("response") is None:
            skipped["failed"] += 1
            continue
        prompt = prompt_of(record)
        if prompt is None:
            skipped["preview"] += 1
            continue
        out.append({
            "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": record["response"]}],
            "metadata": {
                "run_id": run.run_id, "notebook": run.notebook, "reason": run.reason, "kind": "subcall",
                "subcall_id": record.get("id"), "subcall_kind": record.get("kind"), "model": record.get("model"),
                "step": step.number, "pinned": bool(record.get("pinned")),
            },
        })


__all__ = ["examples"]
