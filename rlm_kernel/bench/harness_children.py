"""The harness benchmark's children: each measures one system (ours, rlms or
bare litellm) in a process of its own."""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import time
from typing import Any

from . import (
    maxrss_bytes,
    rss_bytes,
)
from .harness import QUERY, rlms_version


class _Ours:
    name = "ours"

    def __init__(self, cfg: dict[str, Any]) -> None:
        from ..api import RLM
        from ..engine.model.litellm_setup import load_litellm as litellm_module

        litellm_module()  # part of what a run needs; imported before the timer starts
        self._rlm_class = RLM
        self.cfg = cfg
        self._tmp = tempfile.mkdtemp(prefix="rlm-bench-nb-")

    @staticmethod
    def version() -> str:
        from .._version import __version__

        return __version__

    @staticmethod
    def concurrency() -> int:
        from ..engine.runs.options import BY_NAME

        return BY_NAME["concurrency"].default

    def run(self, context: str, root_model: str, sub_model: str, max_iterations: int,
            notebook: bool, query: str = QUERY) -> dict[str, Any]:
        rlm = self._rlm_class(
            f"openai/{root_model}", f"openai/{sub_model}", api_base=self.cfg["url"], api_key="bench",
            max_iterations=max_iterations, **self.cfg.get("ours_options", {}),
        )
        output = os.path.join(self._tmp, "run.ipynb") if notebook else None
        result = rlm.completion(context, query, output=output)
        info: dict[str, Any] = {
            "answer": result.answer_text, "reason": result.reason, "iterations": result.iterations,
            "subcalls": result.subcalls,
        }
        if output:
            info["notebook_bytes"] = os.path.getsize(output)
            os.remove(output)
        return info

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


class _Rlms:
    name = "rlms"

    def __init__(self, cfg: dict[str, Any]) -> None:
        from rlm import RLM
        from rlm.clients import openai as _client  # noqa: F401 - rlms imports its client lazily; not timed,
        # like our litellm import

        self._rlm_class = RLM
        self.cfg = cfg

    @staticmethod
    def version() -> str | None:
        return rlms_version()

    @staticmethod
    def concurrency() -> int | None:
        from rlm.core.lm_handler import LMHandler

        return inspect.signature(LMHandler.__init__).parameters["batch_max_concurrent"].default

    def run(self, context: str, root_model: str, sub_model: str, max_iterations: int,
            notebook: bool, query: str = QUERY) -> dict[str, Any]:
        kwargs = {"base_url": self.cfg["url"], "api_key": "bench"}
        rlm = self._rlm_class(
            backend="openai", backend_kwargs={"model_name": root_model, **kwargs},
            other_backends=["openai"], other_backend_kwargs=[{"model_name": sub_model, **kwargs}],
            max_iterations=max_iterations,
        )
        try:
            result = rlm.completion(context, root_prompt=query)
        finally:
            rlm.close()
        return {"answer": result.response}

    def close(self) -> None:
        pass


def make_harness(cfg: dict[str, Any]) -> _Ours | _Rlms:
    return _Ours(cfg) if cfg["harness"] == "ours" else _Rlms(cfg)


def _child_common(cfg: dict[str, Any]) -> tuple[_Ours | _Rlms, dict[str, Any], str]:
    from . import make_text

    started = time.perf_counter()
    harness = make_harness(cfg)
    info = {
        "harness": harness.name, "version": harness.version(), "concurrency": harness.concurrency(),
        "import_s": round(time.perf_counter() - started, 3), "rss_after_import_bytes": rss_bytes(),
    }
    context = make_text(cfg["context_chars"])
    return harness, info, context


def child_steps(cfg: dict[str, Any]) -> dict[str, Any]:
    harness, info, context = _child_common(cfg)
    plan: list[tuple[str, bool]] = [("cold", True)]
    for _ in range(cfg["repeats"]):
        plan.append(("warm", True))
        if harness.name == "ours":
            plan.append(("warm", False))  # the same run without writing the .ipynb
    runs = []
    for label, notebook in plan:
        cpu = time.process_time()
        started = time.perf_counter()
        run = harness.run(context, cfg["root_model"], cfg["sub_model"], cfg["steps"], notebook)
        run.update({"label": label, "notebook": notebook and harness.name == "ours",
                    "wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu})
        runs.append(run)
    info.update({"runs": runs, "peak_rss_bytes": maxrss_bytes()})
    harness.close()
    return info


def child_batched(cfg: dict[str, Any]) -> dict[str, Any]:
    harness, info, context = _child_common(cfg)
    runs = []
    for i in range(max(1, cfg["repeats"])):
        cpu = time.process_time()
        started = time.perf_counter()
        run = harness.run(context, cfg["root_model"], cfg["sub_model"], 2, False)
        wall = time.perf_counter() - started
        run["cpu_s"] = time.process_time() - cpu
        elapsed, ok = None, None
        parts = str(run.get("answer", "")).split()
        if len(parts) == 2:
            elapsed, ok = float(parts[0]), int(parts[1])
        run.update({"label": "cold" if i == 0 else "warm", "wall_s": wall, "cell_batch_s": elapsed, "ok": ok})
        runs.append(run)
    info.update({"runs": runs, "peak_rss_bytes": maxrss_bytes()})
    harness.close()
    return info


def child_litellm_floor(cfg: dict[str, Any]) -> dict[str, Any]:
    """The batch's prompts through bare ``litellm.acompletion`` at our default
    concurrency, with the same settings our client uses: what litellm alone
    costs, per call, on this machine."""
    import asyncio

    from ..engine.model.litellm_setup import load_litellm as litellm_module
    from ..engine.runs.options import BY_NAME

    started = time.perf_counter()
    litellm = litellm_module()
    concurrency = BY_NAME["concurrency"].default
    info: dict[str, Any] = {"harness": "litellm", "version": litellm_version(), "concurrency": concurrency,
                            "import_s": round(time.perf_counter() - started, 3), "rss_after_import_bytes": rss_bytes()}
    prompts = [f"prompt {i}" for i in range(cfg["prompts"])]

    async def batch() -> tuple[float, int]:
        gate = asyncio.Semaphore(concurrency)

        async def one(prompt: str) -> str:
            async with gate:
                response = await litellm.acompletion(
                    model=f"openai/{cfg['sub_model']}", api_base=cfg["url"], api_key="bench", max_retries=0,
                    messages=[{"role": "user", "content": prompt}])
                return response.choices[0].message.content

        t0 = time.perf_counter()
        answers = await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t0, sum(1 for a, p in zip(answers, prompts, strict=True) if a == "answer to " + p)

    async def main() -> list[dict[str, Any]]:
        runs = []
        for i in range(max(1, cfg["repeats"])):
            cpu = time.process_time()
            elapsed, ok = await batch()
            runs.append({"label": "cold" if i == 0 else "warm", "cell_batch_s": elapsed, "ok": ok,
                         "cpu_s": time.process_time() - cpu, "wall_s": elapsed})
        return runs

    info.update({"runs": asyncio.run(main()), "peak_rss_bytes": maxrss_bytes()})
    return info


def litellm_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("litellm")
    except metadata.PackageNotFoundError:
        return None
