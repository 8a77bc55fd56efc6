"""Model calls through a litellm Router (``--router FILE``).

The file is a litellm Router config, the shape the litellm proxy reads: a
``model_list`` of deployments (several may share a ``model_name``, each with
its own ``litellm_params``: model, api_base, key, rpm/tpm) and optional
``router_settings`` (routing strategy, ``num_retries``, ``allowed_fails``,
``cooldown_time``, fallbacks, Redis for several processes). Model names in a
run (``--model``, ``--sub-model``, ``llm_query(model=...)``) are the
``model_name``s of that list; the Router picks a deployment for each call.

Retries: the Router retries (``router_settings.num_retries``, by default our
``max_retries`` option), moving to another deployment when one fails and
cooling failing ones down; we make exactly one Router call per model call,
so retries never multiply. What we share with :class:`LiteLLMClient` is the
rest: the run's deadline, reading the reply, usage, cost and clear errors.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import ModelError
from ..protocol import json_steps
from .litellm_client import LiteLLMClient, has_price
from .litellm_setup import load_litellm
from .model_client import ModelEndpoint
from .providers import classify, clean_detail, safe_url

# Sections of a litellm proxy config that a bare Router does not use: a file
# written for the proxy works here too.
PROXY_ONLY_SECTIONS = ("litellm_settings", "general_settings", "environment_variables", "include")


def read_router_config(path: str) -> dict[str, Any]:
    """The ``model_list`` and ``router_settings`` of a Router config file
    (YAML or JSON), refused in one sentence when it is not one."""
    import yaml

    where = Path(path).expanduser()
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelError(f"Cannot read the router config {path!r}: {error.strerror or error}.") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ModelError(f"The router config {path!r} is not valid YAML or JSON{at}.") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_list"), list) or not config["model_list"]:
        raise ModelError(f"The router config {path!r} needs a `model_list` of deployments "
                         "(each with a model_name and litellm_params).")
    for number, deployment in enumerate(config["model_list"], 1):
        if (not isinstance(deployment, dict) or not isinstance(deployment.get("model_name"), str)
                or not isinstance(deployment.get("litellm_params"), dict)
                or not isinstance(deployment["litellm_params"].get("model"), str)):
            raise ModelError(f"Deployment {number} of the router config {path!r} needs a model_name and "
                             "litellm_params with a model.")
    settings = config.get("router_settings") or {}
    if not isinstance(settings, dict):
        raise ModelError(f"`router_settings` in the router config {path!r} must be a mapping.")
    unknown = sorted(set(config) - {"model_list", "router_settings", *PROXY_ONLY_SECTIONS})
    if unknown:
        raise ModelError(f"The router config {path!r} has an unknown section {unknown[0]!r}; "
                         "a Router reads model_list and router_settings.")
    return {"model_list": config["model_list"], "router_settings": settings, "path": str(where)}


class RouterClient(LiteLLMClient):
    """Completions through one ``litellm.Router``, made on first use and kept
    for the client's life, so cooldowns and rate counts span its runs."""

    def __init__(self, path: str, *, max_retries: int = 4, request_timeout: float = 600.0,
                 retry_base_delay: float = 0.5) -> None:
        super().__init__(max_retries=0, request_timeout=request_timeout, retry_base_delay=retry_base_delay)
        self.config = read_router_config(path)
        self.path = path
        self.router_retries = max_retries
        self._router: Any = None
        self._priced: set[str] = set()  # deployment ids whose price litellm knows
        self._lock = threading.Lock()

    def model_names(self) -> list[str]:
        return sorted({d["model_name"] for d in self.config["model_list"]})

    def router(self) -> Any:
        if self._router is None:
            with self._lock:
                if self._router is None:
                    self._router = self._new_router()
        return self._router

    def _settings(self) -> dict[str, Any]:
        settings = dict(self.config["router_settings"])
        unknown = sorted(set(settings) - set(load_litellm().Router.get_valid_args()))
        if unknown:
            raise ModelError(f"The router config {self.path!r} has a router setting litellm's Router does not "
                             f"know: {unknown[0]!r}.")
        return settings

    def _new_router(self) -> Any:
        litellm = load_litellm()
        settings = self._settings()
        settings.setdefault("num_retries", self.router_retries)
        # Before the Router registers its deployments (at a price of 0 when it knows none).
        priced = {d["litellm_params"]["model"]: has_price(litellm, d["litellm_params"]["model"])
                  for d in self.config["model_list"]}
        try:
            router = litellm.Router(model_list=self.config["model_list"], **settings)
        except Exception as error:  # noqa: BLE001 - litellm's own validation
            raise ModelError(f"litellm's Router refused the config {self.path!r}: "
                             f"{clean_detail(str(error))}.") from None
        for deployment in router.get_model_list() or []:
            params, info = deployment.get("litellm_params") or {}, deployment.get("model_info") or {}
            if priced.get(params.get("model")) or any(
                    key in where for where in (params, info) for key in ("input_cost_per_token", "output_cost_per_token")):
                self._priced.add(str(info.get("id")))
        return router

    def check(self, endpoint: ModelEndpoint) -> None:
        """Refuse a model name the Router does not serve, or settings it does not take."""
        self._settings()
        if endpoint.model not in self.model_names():
            raise ModelError(self._unknown_model(endpoint.model))

    def _unknown_model(self, model: str) -> str:
        return (f"The router config {self.path!r} has no deployment named {model!r}; "
                f"its model names are {', '.join(self.model_names())}.")

    # -- the hooks of LiteLLMClient's call loop -------------------------------------
    def _call_kwargs(self, endpoint: ModelEndpoint) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": endpoint.model}  # the deployment holds the base URL and key
        if endpoint.json_steps:
            kwargs["response_format"] = json_steps.response_format()
        return kwargs

    async def _attempt(self, call: dict[str, Any], deadline: float | None) -> Any:
        call = {k: v for k, v in call.items() if k != "max_retries"}  # the Router sets the SDK's to 0
        if call["model"] not in self.model_names():
            raise ModelError(self._unknown_model(call["model"]))
        attempt = self.router().acompletion(**call)
        if deadline is None:
            return await attempt
        remaining = max(0.0, deadline - time.monotonic())
        try:
            return await asyncio.wait_for(attempt, remaining)
        except asyncio.TimeoutError:
            raise _DeadlineReached from None

    def _classify(self, error: Exception, endpoint: ModelEndpoint) -> tuple[bool, str, float | None]:
        if isinstance(error, ModelError):
            return False, str(error).rstrip("."), None
        if isinstance(error, _DeadlineReached):
            return False, "the run's time limit was reached during a model call", None
        if type(error).__name__ == "RouterRateLimitError":
            wait = getattr(error, "cooldown_time", None)
            return False, (f"no deployment of {endpoint.model} is available (all are cooling down or at their "
                           f"rate limits; the Router says try again in {wait:g} s)" if wait is not None else
                           f"no deployment of {endpoint.model} is available"), None
        retryable, message, wait = classify(error, endpoint)
        return retryable, f"{message} (through the router)", wait

    def _cost(self, litellm: Any, response: Any, endpoint: ModelEndpoint) -> float | None:
        hidden = getattr(response, "_hidden_params", None) or {}
        if str(hidden.get("model_id")) not in self._priced:
            return None  # the Router says 0 for a model it has no price for: unknown, not free
        cost = hidden.get("response_cost")
        return None if cost is None else float(cost)

    def _attempts(self, response: Any, attempt: int) -> int:
        headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers") or {}
        try:
            return 1 + int(headers.get("x-litellm-attempted-retries") or 0)
        except (TypeError, ValueError):
            return attempt

    def _deployment(self, response: Any) -> dict[str, str] | None:
        hidden = getattr(response, "_hidden_params", None) or {}
        deployment = {}
        if hidden.get("model_id"):
            deployment["id"] = str(hidden["model_id"])
        if hidden.get("api_base"):
            # A streamed reply names the endpoint's full URL: the deployment's base is the same either way.
            base = str(hidden["api_base"]).removesuffix("/chat/completions")
            deployment["api_base"] = safe_url(base)
        return deployment or None


class _DeadlineReached(Exception):
    """The run's deadline passed while the Router was still trying."""


__all__ = ["RouterClient", "read_router_config"]
