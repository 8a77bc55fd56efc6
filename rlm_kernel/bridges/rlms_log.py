"""An ``rlms`` JSONL log (the official library's ``RLMLogger``) read as an
:class:`~.imported.ImportedRun`.

The log: a ``{"type": "metadata", root_model, max_depth, max_iterations,
backend, backend_kwargs, other_backends, ...}`` line, then one ``{"type":
"iteration", iteration, prompt, response, code_blocks: [{code, result:
{stdout, stderr, execution_time, rlm_calls: [...]}}], final_answer,
iteration_time}`` line per step. Each ``rlm_calls`` entry is a sub-call
(``root_model``, ``prompt``, ``response``, ``usage_summary``,
``execution_time``, ``error``); one whose ``metadata`` holds
``{"run_metadata", "iterations"}`` was a child run (``rlm_query``) and is
read the same way. Our own ``rlm-kernel export --format rlms-jsonl``
writes this format too.

Models are named as litellm names them (``openai/<model_name>`` for the
``openai`` backend), so the notebook's query cell takes the same endpoints
on resume. Never copied: ``backend_kwargs`` beyond the model's name (it
holds the library's client settings, keys among them). Not in the log,
so not in the notebook: the context itself, the root calls' tokens.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..errors import RLMError
from .imported import ImportedBlock, ImportedCall, ImportedRun, ImportedStep

RLMS_QUESTION = "Answer the following: "
# rlms client backends -> litellm's provider prefix ("litellm": our export, names already litellm's)
PREFIXES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gemini", "azure_openai": "azure",
            "openrouter": "openrouter", "vllm": "hosted_vllm", "portkey": "openai", "vercel": "openai"}


def read_log(path: str, query: str | None = None) -> ImportedRun:
    """The run in the log at ``path`` (one sentence when it is not one)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle if line.strip()]
    except OSError as error:
        raise RLMError(f"Cannot read {path!r}: {error.strerror or error}.") from None
    except ValueError:
        raise RLMError(f"{path!r} is not an rlms log: a line is not JSON.") from None
    meta = next((line for line in lines if isinstance(line, dict) and line.get("type") == "metadata"), None)
    iterations = [line for line in lines if isinstance(line, dict) and line.get("type") == "iteration"]
    if meta is None or not iterations:
        raise RLMError(f"{path!r} is not an rlms log: it needs a metadata line and iteration lines.")
    run = read_run(meta, iterations, query=query)
    run.source = path
    run.started = meta.get("timestamp")
    return run


def litellm_name(model: str | None, backend: str | None) -> str:
    model = model or "unknown"
    prefix = PREFIXES.get(backend or "")
    return f"{prefix}/{model}" if prefix and not model.startswith(prefix + "/") else model


def read_run(meta: dict[str, Any], iterations: list[dict[str, Any]], *, query: str | None = None,
             sub_model: str | None = None) -> ImportedRun:
    backend = meta.get("backend")
    others = meta.get("other_backends") or []
    model = litellm_name(meta.get("root_model") or (meta.get("backend_kwargs") or {}).get("model_name"), backend)
    sub_backend = others[0] if others else backend
    steps = [_step(entry, backend, sub_backend) for entry in sorted(iterations, key=lambda e: e.get("iteration", 0))]
    calls = [c for s in steps for b in s.blocks for c in b.calls]
    plain = Counter(c.hash_model for c in calls if c.child is None)
    default_sub = plain.most_common(1)[0][0] if plain else None  # the name llm_query(prompt) reached
    if sub_model is None:
        sub_model = (meta.get("environment_kwargs") or {}).get("sub_model") or next(
            (c.model for c in calls if c.child is None and c.hash_model == default_sub), None)
    root_raw = meta.get("root_model") or (meta.get("backend_kwargs") or {}).get("model_name")
    for call in calls:
        # A re-run replays a call by the model its code names: none (our helpers then ask the sub-model, where
        # rlms's rlm_query asked the root model), or the name rlms's client took, written in the code
        if call.hash_model in (default_sub if call.child is None else root_raw, None) and sub_model:
            call.hash_model = sub_model
    final = next((e.get("final_answer") for e in reversed(iterations) if e.get("final_answer") is not None), None)
    limits: dict[str, Any] = {}
    if isinstance(meta.get("max_iterations"), int) and meta["max_iterations"] >= 1:
        limits["max_iterations"] = meta["max_iterations"]
    if isinstance(meta.get("max_depth"), int) and meta["max_depth"] >= 1:
        limits["max_depth"] = meta["max_depth"] - 1  # rlms counts the root: 1 = no recursion
    asked = query or _root_prompt(iterations[0].get("prompt")) or "(the question was not in the rlms log)"
    elapsed = sum(float(e.get("iteration_time") or 0.0) for e in iterations)
    return ImportedRun(query=asked, model=model, sub_model=sub_model, steps=steps,
                       answer=None if final is None else str(final),
                       reason="final" if final is not None else "max_iterations", limits=limits, library="rlms",
                       elapsed_s=round(elapsed, 3))


def _root_prompt(prompt: Any) -> str | None:
    """The question the root model was given, when the log's first prompt
    shows it: rlms 0.1.3 opens its context message with ``Answer the
    following: QUESTION``; our export's first message has a ``Query:`` line."""
    if not isinstance(prompt, list):
        return None
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or message.get("role") != "user":
            continue
        if content.startswith(RLMS_QUESTION):
            return content[len(RLMS_QUESTION):].split("\n\n", 1)[0].strip() or None
        if "\nQuery: " in content:
            return content.split("\nQuery: ", 1)[1].split("\n", 1)[0].strip() or None
    return None


def _step(entry: dict[str, Any], backend: str | None, sub_backend: str | None) -> ImportedStep:
    from ..engine.protocol.reply import parse_reply

    response = entry.get("response") or ""
    parsed = parse_reply(response)
    prose = "\n\n".join(s.text.strip() for s in parsed.segments if s.kind == "prose" and s.text.strip())
    blocks = [_block(b, backend, sub_backend) for b in entry.get("code_blocks") or []]
    run_s = sum(b.duration_s for b in blocks)
    total = entry.get("iteration_time")
    latency = max(0.0, float(total) - run_s) if isinstance(total, (int, float)) else None
    return ImportedStep(prose=prose, blocks=blocks, latency_s=latency)


def _block(block: dict[str, Any], backend: str | None, sub_backend: str | None) -> ImportedBlock:
    result = block.get("result") or {}
    stderr = str(result.get("stderr") or "")
    calls = [_call(c, backend, sub_backend) for c in result.get("rlm_calls") or [] if isinstance(c, dict)]
    return ImportedBlock(code=str(block.get("code") or ""), stdout=str(result.get("stdout") or ""), stderr=stderr,
                         error=bool(stderr.strip()), duration_s=float(result.get("execution_time") or 0.0),
                         calls=calls)


def _call(entry: dict[str, Any], backend: str | None, sub_backend: str | None) -> ImportedCall:
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else None
    child = None
    if metadata and metadata.get("iterations"):
        child_meta = metadata.get("run_metadata") or {}
        child = read_run({**child_meta, "type": "metadata"}, list(metadata["iterations"]), query=None)
        child.query = "(a child run)"
    name = entry.get("root_model")
    model = child.model if child is not None else litellm_name(name, sub_backend if sub_backend else backend)
    usage = _usage(entry.get("usage_summary"))
    if entry.get("prompt_tokens") is not None:  # our export writes them on each call
        usage = (int(entry["prompt_tokens"]), int(entry.get("completion_tokens") or 0), usage[2])
    prompt = entry.get("prompt")
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    return ImportedCall(model=model, hash_model=name, prompt=text, response=str(entry.get("response") or ""),
                        recorded_hash=entry.get("prompt_hash"), prompt_tokens=usage[0],
                        completion_tokens=usage[1], cost_usd=usage[2],
                        latency_s=float(entry.get("execution_time") or 0.0), error=entry.get("error"), child=child)


def _usage(summary: Any) -> tuple[int, int, float | None]:
    models = (summary or {}).get("model_usage_summaries") or {} if isinstance(summary, dict) else {}
    tokens_in = sum(int(m.get("total_input_tokens") or 0) for m in models.values())
    tokens_out = sum(int(m.get("total_output_tokens") or 0) for m in models.values())
    costs = [m["total_cost"] for m in models.values() if m.get("total_cost") is not None]
    return tokens_in, tokens_out, (sum(costs) if costs else None)


__all__ = ["litellm_name", "read_log", "read_run"]
