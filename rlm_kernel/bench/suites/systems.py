"""The systems a suite compares, each answering one task at a time:

* ``ours``: ``rlm_kernel.RLM(...).completion(context, question)``;
* ``base``: one call to the root model with the context cut to fit
  ``base_max_tokens`` (estimated tokens) followed by the question;
* ``rlms``: the official ``rlms`` library on the same task.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...redaction import redact
from . import CHARS_PER_TOKEN, SuiteError, Task, length_label

SYSTEMS = ("ours", "base", "rlms")
TITLES = {"ours": "RLM (rlm-kernel)", "base": "base model", "rlms": "RLM (rlms)"}

BASE_INSTRUCTIONS = ("Read the context below and answer the question after it. "
                     "Give only the answer, in the form the question asks for.")


@dataclass
class Models:
    model: str
    sub_model: str | None = None
    api_base: str | None = None
    sub_api_base: str | None = None


@dataclass
class Outcome:
    answer: str | None
    tokens: int
    cost_usd: float | None
    elapsed_s: float
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Ours:
    name = "ours"

    def __init__(self, models: Models, *, max_iterations: int = 30, max_cost: float | None = None,
                 out_dir: str | None = None, **rlm_kwargs: Any) -> None:
        from ...api import RLM

        self.rlm = RLM(models.model, models.sub_model, api_base=models.api_base, sub_api_base=models.sub_api_base,
                       max_iterations=max_iterations, max_cost=max_cost, **rlm_kwargs)
        self.notebooks = Path(out_dir, "notebooks") if out_dir else None

    def answer(self, task: Task) -> Outcome:
        output = None
        if self.notebooks is not None:
            self.notebooks.mkdir(parents=True, exist_ok=True)
            output = self.notebooks / f"{task.suite}-{length_label(task.length)}-{task.index}.ipynb"
        started = time.perf_counter()
        result = self.rlm.completion(task.context, task.question, output=output)  # ModelError: stop everything
        elapsed = time.perf_counter() - started
        tokens = sum(u.get("prompt_tokens", 0) + u.get("completion_tokens", 0) for u in result.usage.values())
        return Outcome(
            answer=None if result.answer is None else result.answer_text, tokens=tokens, cost_usd=result.cost_usd,
            elapsed_s=elapsed, error=result.error,
            extra={"reason": result.reason, "iterations": result.iterations, "subcalls": result.subcalls,
                   **({"notebook": str(output)} if output else {})},
        )

    def close(self) -> None:
        pass


class Base:
    name = "base"

    def __init__(self, models: Models, *, base_max_tokens: int = 100_000, max_retries: int = 4,
                 retry_base_delay: float = 0.5, **_: Any) -> None:
        from ...engine.model.litellm_client import LiteLLMClient
        from ...engine.model.model_client import ModelEndpoint
        from ...engine.model.providers import check_endpoint

        self.endpoint = ModelEndpoint(models.model, models.api_base)
        check_endpoint(self.endpoint)
        self.client = LiteLLMClient(max_retries=max_retries, retry_base_delay=retry_base_delay)
        self.max_chars = base_max_tokens * CHARS_PER_TOKEN

    def prompt(self, task: Task) -> tuple[str, bool]:
        """The one user message, and whether the context had to be cut."""
        room = max(0, self.max_chars - len(BASE_INSTRUCTIONS) - len(task.question) - 64)
        context = task.context[:room]
        return f"{BASE_INSTRUCTIONS}\n\nContext:\n{context}\n\nQuestion: {task.question}", len(context) < len(task.context)

    def answer(self, task: Task) -> Outcome:
        from ...engine.execution.engine_loop import submit, wait_interruptibly
        from ...engine.model.model_client import ModelCallError

        text, truncated = self.prompt(task)
        started = time.perf_counter()
        try:
            # on the engine loop, like every other model call (litellm keeps tasks on the loop it first saw)
            reply = wait_interruptibly(submit(self.client.complete(self.endpoint, [{"role": "user", "content": text}])))
        except ModelCallError as error:
            return Outcome(None, 0, None, time.perf_counter() - started, error=str(error),
                           extra={"truncated": truncated})
        return Outcome(reply.text, reply.prompt_tokens + reply.completion_tokens, reply.cost_usd,
                       time.perf_counter() - started, extra={"truncated": truncated})

    def close(self) -> None:
        pass


_RLMS_BACKENDS = {"openai": "openai", "anthropic": "anthropic", "gemini": "gemini", "openrouter": "openrouter",
                  "azure": "azure_openai"}


def rlms_backend(model: str, api_base: str | None) -> tuple[str, dict[str, Any]]:
    """The rlms backend and its kwargs for a litellm model name."""
    provider, _, name = model.partition("/")
    if not name:
        provider, name = "openai", model
    if api_base:  # any OpenAI-compatible server
        key = os.environ.get("OPENAI_API_KEY") or "no-key-needed"
        return "openai", {"model_name": name, "base_url": api_base, "api_key": key}
    if provider not in _RLMS_BACKENDS:
        raise SuiteError(f"The rlms library has no backend for the provider {provider!r} of {model!r}; "
                         "compare with rlms on openai, anthropic, gemini, openrouter or azure models, "
                         "or an --api-base server.")
    return _RLMS_BACKENDS[provider], {"model_name": name}


class Rlms:
    name = "rlms"

    def __init__(self, models: Models, *, max_iterations: int = 30, max_cost: float | None = None, **_: Any) -> None:
        try:
            from rlm import RLM
        except ImportError:
            raise SuiteError("--compare rlms needs the official rlms library; install it with: "
                             "pip install 'rlm-kernel[bench]'") from None
        self._rlm_class = RLM
        self.root = rlms_backend(models.model, models.api_base)
        self.sub = rlms_backend(models.sub_model or models.model, models.sub_api_base or models.api_base)
        self.max_iterations = max_iterations
        self.max_cost = max_cost

    def answer(self, task: Task) -> Outcome:
        (backend, kwargs), (sub_backend, sub_kwargs) = self.root, self.sub
        started = time.perf_counter()
        rlm = self._rlm_class(backend=backend, backend_kwargs=dict(kwargs), other_backends=[sub_backend],
                              other_backend_kwargs=[dict(sub_kwargs)], max_iterations=self.max_iterations,
                              max_budget=self.max_cost)
        try:
            result = rlm.completion(task.context, root_prompt=task.question)
        except Exception as error:  # noqa: BLE001 - a failed task scores 0; the suite goes on
            return Outcome(None, 0, None, time.perf_counter() - started,
                           error=redact(f"{type(error).__name__}: {error}")[:500])
        finally:
            rlm.close()
        usage = result.usage_summary
        return Outcome(result.response, usage.total_input_tokens + usage.total_output_tokens, usage.total_cost,
                       time.perf_counter() - started, error=result.error)

    def close(self) -> None:
        pass


def make_system(name: str, models: Models, **options: Any) -> Ours | Base | Rlms:
    if name == "ours":
        keep = ("max_iterations", "max_cost", "out_dir", "retry_base_delay", "max_retries")
        return Ours(models, **{k: v for k, v in options.items() if k in keep})
    if name == "base":
        return Base(models, **options)
    if name == "rlms":
        return Rlms(models, **options)
    raise SuiteError(f"Unknown system {name!r} to compare with; use base or rlms.")


__all__ = ["SYSTEMS", "TITLES", "Models", "Outcome", "Ours", "Base", "Rlms", "make_system", "rlms_backend"]
