"""Every model call goes through here: litellm, our own retries (honouring
Retry-After, backoff with jitter), clear errors, usage and cost."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ModelError, redact
from . import json_steps

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm's own httpx handler for OpenAI-style endpoints instead of the openai
# SDK, whose request building walks every message on every call: ~5x less CPU
# per call with a long history. Set it to False to go back to the SDK.
os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "True")

_litellm: Any = None
_litellm_lock = threading.Lock()


def litellm_loaded() -> bool:
    return _litellm is not None


def litellm_module() -> Any:
    """Import litellm lazily: it takes seconds and ~170 MB."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _litellm_lock:  # the kernel's warm-up thread and a first run may both get here
        if _litellm is not None:
            return _litellm
        import atexit
        import gc

        import litellm

        from .dispatch import stop_engine_loop

        atexit.register(stop_engine_loop)  # runs before litellm's exit handler (registered at its import)
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = True
        # The import leaves ~300,000 objects that live as long as the process (and no
        # garbage: a collection right after it finds none); every full collection
        # walked them all, ~0.2 s with the engine loop stalled, every few hundred
        # sub-calls. Set them aside for good so that later passes see newer objects only.
        gc.freeze()
        _litellm = litellm
    return _litellm


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    attempts: int


class ModelCallError(Exception):
    """A call failed for good (after retries, or at once for errors retrying cannot fix)."""

    def __init__(self, message: str, retryable: bool, attempts: int = 1) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.attempts = attempts


@dataclass
class ModelEndpoint:
    """A model name plus where and how to reach it."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    json_steps: bool = False  # replies held to a JSON step (llama.cpp servers; see json_steps.py)

    def call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.json_steps:
            kwargs["response_format"] = json_steps.response_format()
        key = self.api_key
        if key is None and self.api_base and not _provider_key_present(self.model):
            # Local OpenAI-compatible servers ignore the key, but litellm insists on one.
            key = "no-key-needed"
        if key is not None:
            kwargs["api_key"] = key
        return kwargs


def _provider_key_present(model: str) -> bool:
    try:
        return bool(litellm_module().validate_environment(model=model).get("keys_in_environment"))
    except Exception:
        return False


def check_endpoint(endpoint: ModelEndpoint) -> None:
    """Fail fast, in one sentence, on an unknown model name or a missing key."""
    litellm = litellm_module()
    if not endpoint.model or not endpoint.model.strip():
        raise ModelError("No model given; pass --model (or set RLM_MODEL) to a litellm model name such as openai/gpt-4o-mini.")
    try:
        litellm.get_llm_provider(model=endpoint.model, api_base=endpoint.api_base)
    except Exception:
        raise ModelError(
            f"Unknown model {endpoint.model!r}: use a litellm model name with its provider, "
            "e.g. openai/gpt-4o-mini, anthropic/claude-sonnet-4-5 or ollama/llama3."
        ) from None
    if endpoint.api_base:
        problem = _unreachable(endpoint.api_base)
        if problem:
            raise ModelError(f"Cannot reach the model server at {safe_url(endpoint.api_base)} ({problem}); "
                             "check --api-base and that the server is running.")
    if endpoint.api_key or endpoint.api_base:
        return
    try:
        env = litellm.validate_environment(model=endpoint.model)
    except Exception:
        return
    missing = env.get("missing_keys") or []
    if missing and not env.get("keys_in_environment"):
        raise ModelError(f"Model {endpoint.model!r} needs {_needed_keys(missing)}; set it in the environment "
                         "(or pass --api-base for a local server).")


# Variables of which any one will do (litellm lists them all as missing).
_EITHER_KEY = ({"GEMINI_API_KEY", "GOOGLE_API_KEY"},)


def _needed_keys(missing: list[str]) -> str:
    """``A and B`` for keys needed together, ``A or B`` for alternatives."""
    if any(set(missing) == names for names in _EITHER_KEY):
        return " or ".join(missing)
    return " and ".join(missing)


def _unreachable(api_base: str, timeout: float = 5.0) -> str | None:
    """Why no TCP connection to ``api_base`` opens (None when one does), so
    a wrong URL fails at once instead of after every retry. Skipped behind a
    proxy, which alone knows the way."""
    if any(os.environ.get(name) for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                             "http_proxy", "https_proxy", "all_proxy")):
        return None
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(api_base)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https") or not host:
        return "not an http:// or https:// URL"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror:
        return f"unknown host {host!r}"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g} s"
    except OSError as error:
        return (error.strerror or type(error).__name__).lower()
    return None


def safe_url(url: str) -> str:
    """``url`` without user:password@ or a query string (either may hold a key)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<the given URL>"
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


class LLMClient:
    """Async model calls with retries. One instance serves a whole run tree."""

    def __init__(
        self,
        *,
        max_retries: int = 4,
        request_timeout: float = 600.0,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        extra_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.max_retries = max_retries
        self.request_timeout = request_timeout
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.extra_kwargs = extra_kwargs or {}

    async def complete(
        self,
        endpoint: ModelEndpoint,
        messages: list[dict[str, Any]],
        *,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> Completion:
        litellm = litellm_module()
        call = {
            **endpoint.call_kwargs(),
            "messages": messages,
            "timeout": self.request_timeout,
            "max_retries": 0,
            **self.extra_kwargs,
            **kwargs,
        }
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ModelCallError("the run's time limit was reached during a model call", False, attempt)
                call["timeout"] = min(self.request_timeout, remaining)
            try:
                response = await litellm.acompletion(**call)
                text = _reply_text(response)
                if endpoint.json_steps:
                    text = json_steps.step_text(text)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - classified below
                retryable, message, wait = _classify(error, endpoint)
                if not retryable or attempt > self.max_retries:
                    suffix = f" after {attempt} attempts" if attempt > 1 else ""
                    raise ModelCallError(f"{message}{suffix}", retryable, attempt) from None
                delay = wait if wait is not None else self._backoff(attempt)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise ModelCallError(f"{message} (no time left to retry)", retryable, attempt) from None
                await asyncio.sleep(delay)
                continue
            usage = getattr(response, "usage", None)
            return Completion(
                text=text,
                model=endpoint.model,
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                cost_usd=_cost(litellm, response, endpoint.model),
                latency_s=time.monotonic() - started,
                attempts=attempt,
            )

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.retry_max_delay, self.retry_base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # jitter keeps a burst of retries apart


class MalformedReply(Exception):
    pass


def _reply_text(response: Any) -> str:
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedReply("the provider returned no choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is None:
        # Some servers put everything in a reasoning field or return tool calls only.
        content = getattr(message, "reasoning_content", None) or ""
    return content


_UNPRICED: set[str] = set()


def _cost(litellm: Any, response: Any, model: str) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is not None:
        return float(cost)
    if model in _UNPRICED:
        return None
    try:
        return float(litellm.completion_cost(completion_response=response, model=model))
    except Exception:
        _UNPRICED.add(model)  # looked up once: the lookup is slow
        return None  # unknown price: never a made-up 0


def _retry_after(error: Any) -> float | None:
    headers: dict[str, str] = {}
    for source in (getattr(error, "litellm_response_headers", None), getattr(getattr(error, "response", None), "headers", None)):
        if source:
            try:
                headers.update({k.lower(): v for k, v in dict(source).items()})
            except Exception:
                pass
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _classify(error: Exception, endpoint: ModelEndpoint) -> tuple[bool, str, float | None]:
    """(retryable, one-sentence message, server-requested wait)."""
    litellm = litellm_module()
    ex = litellm.exceptions
    model = endpoint.model
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    detail = clean_detail(redact(str(error)))  # redacted whole, before it is shortened
    if isinstance(error, MalformedReply):
        return True, f"model {model} sent a malformed reply ({error})", None
    if isinstance(error, ex.AuthenticationError):
        return False, f"the provider rejected the API key for {model}: check {_key_name(model)}", None
    if isinstance(error, ex.RateLimitError):
        return True, f"model {model} is rate-limited (HTTP 429)", _retry_after(error)
    if isinstance(error, ex.ContextWindowExceededError):
        return False, f"the prompt is too long for {model}'s context window; send a smaller slice", None
    if isinstance(error, ex.NotFoundError):
        said = f": {_short(detail, 160)}" if detail else ""
        return False, f"the provider has no model named {model!r} (HTTP 404{said}); check the model name", None
    if isinstance(error, (ex.Timeout,)):
        return True, f"model {model} timed out", None
    if isinstance(error, ex.APIConnectionError):
        where = f" at {safe_url(endpoint.api_base)}" if endpoint.api_base else ""
        return True, f"cannot reach model {model}{where}: {detail}", None
    if isinstance(error, (ex.InternalServerError, ex.ServiceUnavailableError, ex.BadGatewayError)) or (
        status is not None and status >= 500
    ):
        return True, f"model {model} had a server error (HTTP {status or '5xx'})", _retry_after(error)
    if isinstance(error, ex.BadRequestError):
        if "LLM Provider NOT provided" in str(error):
            return False, f"unknown model {model!r}: use a litellm name such as openai/gpt-4o-mini", None
        return False, f"model {model} refused the request (HTTP {status or 400}): {detail}", None
    if isinstance(error, ex.APIError) and status is not None and 400 <= status < 500 and status not in (408, 409):
        # 403 and friends: asking again gives the same answer
        return False, f"model {model} refused the request (HTTP {status}): {detail}", None
    if isinstance(error, ex.APIError):
        return True, f"model {model} failed: {detail}", None
    if isinstance(error, (ValueError, KeyError, TypeError)):
        # litellm raises these on bodies it cannot parse
        return True, f"model {model} sent a reply that could not be parsed: {detail}", None
    return False, f"model {model} failed: {type(error).__name__}: {detail}", None


# litellm's prefixes: "litellm.NotFoundError: NotFoundError: OpenAIException - {...}"
_LITELLM_PREFIX = re.compile(r"^\s*(?:litellm\.\w+:\s*)?(?:\w+(?:Error|Exception):\s*)*(?:\w+Exception\s*-\s*)?")


def clean_detail(text: str) -> str:
    """What the provider said, without litellm's exception prefixes and,
    for a JSON error body, just its message; short, one line, no final period."""
    text = " ".join(text.split())
    text = _LITELLM_PREFIX.sub("", text, count=1)
    if text.startswith("{"):
        try:
            body = json.loads(text)
        except ValueError:
            pass
        else:
            error = body.get("error", body) if isinstance(body, dict) else body
            message = error.get("message") if isinstance(error, dict) else error
            if isinstance(message, str) and message.strip():
                text = " ".join(message.split())
    return _short(text).rstrip(". ")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_KEY_NAMES = {
    "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY or GOOGLE_API_KEY",
    "groq": "GROQ_API_KEY", "mistral": "MISTRAL_API_KEY", "openrouter": "OPENROUTER_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY", "xai": "XAI_API_KEY", "together_ai": "TOGETHERAI_API_KEY",
    "cohere": "COHERE_API_KEY", "azure": "AZURE_API_KEY",
}


def _key_name(model: str) -> str:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return _KEY_NAMES.get(provider, f"the {provider} API key variable")


def model_error(error: ModelCallError) -> ModelError:
    return ModelError(str(error)[:1].upper() + str(error)[1:] + ".")
