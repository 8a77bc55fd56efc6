"""What reading one streamed root reply costs in litellm itself, apart from
the harness: a reply of the instant run (a line of prose and a code block,
about 15 chunks) asked of the same scripted server three ways, in turns:
streamed and read through litellm's stream wrapper (``CustomStreamWrapper``,
how rlm-kernel reads every streamed call), streamed and read as the chunks
litellm's provider reader parsed before the wrapper takes them (its
``completion_stream``: read here only, to split the cost), and whole. Part of
the live-speed benchmark (bench_live_speed.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

MODES = ("wrapper", "provider_chunks", "whole")


async def _read(litellm: Any, url: str, mode: str) -> float:
    messages = [{"role": "user", "content": "Walk through the steps. " + "word " * 400}]
    started = time.perf_counter()
    if mode == "whole":
        await litellm.acompletion(model="openai/root-model", api_base=url, api_key="x", messages=messages)
        return time.perf_counter() - started
    stream = await litellm.acompletion(model="openai/root-model", api_base=url, api_key="x", messages=messages,
                                       stream=True, stream_options={"include_usage": True})
    chunks = 0
    if mode == "wrapper":
        async for _ in stream:
            chunks += 1
    else:
        if stream.completion_stream is None:
            await stream.fetch_stream()
        async for _ in stream.completion_stream:
            chunks += 1
    assert chunks >= 5, (mode, chunks)
    return time.perf_counter() - started


def time_stream_reading(url: str, calls: int) -> dict[str, list[float]]:
    """Seconds per call of each way, ``calls`` of each, in turns."""
    from rlm_kernel.engine.execution.engine_loop import engine_loop
    from rlm_kernel.engine.model.litellm_setup import load_litellm

    litellm = load_litellm()  # with rlm-kernel's settings (its HTTP handler for OpenAI-style endpoints)

    async def measure() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for mode in MODES:  # a first call of each opens its connection
            await _read(litellm, url, mode)
        for _ in range(calls):
            for mode in MODES:
                times[mode].append(await _read(litellm, url, mode))
        return times

    # On the loop every model call of a run is made on (litellm keeps its clients per loop).
    return asyncio.run_coroutine_threadsafe(measure(), engine_loop()).result(timeout=600)
