"""What we know about providers: checking a model endpoint before a run
(name, key, server), and reading their errors as one clear sentence."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ...errors import ModelError
from ...redaction import redact
from .litellm_setup import load_litellm
from .model_client import ModelCallError, ModelEndpoint


def provider_key_present(model: str) -> bool:
    """Whether the environment holds a key for ``model``'s provider."""
    try:
        return bool(load_litellm().validate_environment(model=model).get("keys_in_environment"))
    except Exception:
        return False


def check_endpoint(endpoint: ModelEndpoint) -> None:
    """Fail fast, in one sentence, on an unknown model name, a missing key
    or a server that cannot be reached."""
    litellm = load_litellm()
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
        problem = unreachable(endpoint.api_base)
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


def unreachable(api_base: str, timeout: float = 5.0) -> str | None:
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


class MalformedReply(Exception):
    """A 200 reply with nothing usable in it (no choices)."""


def retry_after(error: Any) -> float | None:
    """The wait a provider asked for (Retry-After / retry-after-ms), in seconds."""
    headers: dict[str, str] = {}
    for source in (getattr(error, "litellm_response_headers", None),
                   getattr(getattr(error, "response", None), "headers", None)):
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


def classify(error: Exception, endpoint: ModelEndpoint) -> tuple[bool, str, float | None]:
    """(retryable, one-sentence message, server-requested wait) for a failed call."""
    ex = load_litellm().exceptions
    model = endpoint.model
    status = getattr(error, "status_code", None)
    status = status if isinstance(status, int) else None
    detail = clean_detail(redact(str(error)))  # redacted whole, before it is shortened
    if isinstance(error, MalformedReply):
        return True, f"model {model} sent a malformed reply ({error})", None
    if isinstance(error, ex.AuthenticationError):
        return False, f"the provider rejected the API key for {model}: check {key_name(model)}", None
    if isinstance(error, ex.RateLimitError):
        return True, f"model {model} is rate-limited (HTTP 429)", retry_after(error)
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
        return True, f"model {model} had a server error (HTTP {status or '5xx'})", retry_after(error)
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


def key_name(model: str) -> str:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return _KEY_NAMES.get(provider, f"the {provider} API key variable")


def model_error(error: ModelCallError) -> ModelError:
    return ModelError(str(error)[:1].upper() + str(error)[1:] + ".")


__all__ = ["MalformedReply", "check_endpoint", "classify", "clean_detail", "key_name", "model_error",
           "provider_key_present", "retry_after", "safe_url", "unreachable"]
