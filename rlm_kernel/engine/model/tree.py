"""What a run shares with its child runs: the options and budget, the model
client and endpoints, the concurrency limit, the stop flag and the person's
tools. Every model call of the tree is made through :meth:`RunTree.charged_call`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..execution.tools import Toolbox
from ..protocol import json_steps
from .budget import Budget
from .model_client import Completion, ModelClient, ModelEndpoint, StreamListener


def endpoints(options: Any) -> tuple[ModelEndpoint, ModelEndpoint]:
    """The root model's and the sub-model's endpoints. The sub-model uses
    the root model's key when it is on the same server (or neither names one)."""
    root = ModelEndpoint(options.model or "", options.api_base, options.api_key,
                         json_steps=json_steps.wanted_for(options.model or ""))
    sub_key = options.sub_api_key
    if sub_key is None and options.sub_api_base == options.api_base:
        sub_key = options.api_key
    return root, ModelEndpoint(options.sub_model or "", options.sub_api_base, sub_key)


class RunTree:
    def __init__(self, client: ModelClient, options: Any, tools: Toolbox | None = None) -> None:
        self.client = client
        self.options = options  # RunOptions
        self.tools = tools or Toolbox()  # a person's own functions; a child run may call them too
        self.budget = Budget(options)
        self.root_endpoint, self.sub_endpoint = endpoints(options)
        self.stopping: str | None = None  # reason, once someone asked the run to stop
        self.replayed = 0  # sub-calls answered from the notebook instead of a model
        self.subcalls_queued = 0  # sub-calls waiting for a place (of `concurrency`)
        self.subcalls_running = 0  # sub-calls with a model call (or a child run) going on
        self._semaphore: asyncio.Semaphore | None = None
        self.lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def slots(self) -> AsyncIterator[None]:
        """One of the ``concurrency`` places for a model call, shared by the whole tree."""
        if self._semaphore is None:  # created on the engine loop, where it is used
            self._semaphore = asyncio.Semaphore(self.options.concurrency)
        async with self._semaphore:
            yield

    def _count(self, queued: int = 0, running: int = 0) -> None:
        with self.lock:
            self.subcalls_queued += queued
            self.subcalls_running += running

    @contextlib.asynccontextmanager
    async def subcall_slot(self) -> AsyncIterator[None]:
        """:meth:`slots` for a sub-call, counted as queued, then running."""
        self._count(queued=1)
        entered = False
        try:
            async with self.slots():
                self._count(queued=-1, running=1)
                entered = True
                yield
        finally:
            self._count(queued=0 if entered else -1, running=-1 if entered else 0)

    @contextlib.contextmanager
    def running_child(self) -> Iterator[None]:
        """A child run (rlm_query) counts as one running sub-call while it runs."""
        self._count(running=1)
        try:
            yield
        finally:
            self._count(running=-1)

    async def charged_call(self, endpoint: ModelEndpoint, messages: list[dict[str, Any]],
                           listener: StreamListener | None = None) -> Completion:
        """One model call within the run's time limit, charged to the budget
        (the caller holds a place of :meth:`slots` and counts its own tokens).
        Raises ``ModelCallError``."""
        completion = await self.client.complete(endpoint, messages, deadline=self.budget.deadline, listener=listener)
        self.budget.charge(completion)
        return completion

    def sub_endpoint_for(self, model: str | None) -> ModelEndpoint:
        """The sub-model's endpoint, or another model on the same server."""
        base = self.sub_endpoint
        if model is None or model == base.model:
            return base
        return ModelEndpoint(model, base.api_base, base.api_key)


__all__ = ["RunTree", "endpoints"]
