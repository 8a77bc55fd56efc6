"""Where traces go: OpenTelemetry's SDK and its OTLP exporter, set up once
per process when tracing is on.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, as every OpenTelemetry SDK
reads it; ``rlm-kernel run --trace`` sets it. Prompts, replies, code and
outputs go into spans only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true (the GenAI
conventions' switch; ``--trace-content`` sets it). The protocol is
``http/protobuf`` unless ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` says
``grpc``. The provider is ours, not the global one: a process's own
OpenTelemetry set-up is left as it is.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import RLMError

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DEFAULT_ENDPOINT = "http://127.0.0.1:4318"  # an OTLP/HTTP receiver on this machine (Phoenix, a collector...)
INSTALL_HINT = "pip install 'rlm-kernel[tracing]'"
SERVICE_NAME = "rlm-kernel"
FLUSH_S = 3.0  # at the end of a root run, at most this long waiting for its spans to leave

_lock = threading.Lock()
_provider: Any = None


def tracing_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether runs are traced: an OTLP endpoint is set and the SDK is not disabled."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get(ENDPOINT_ENV) or env.get(TRACES_ENDPOINT_ENV))


def content_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether spans carry prompts, replies, code and outputs (off unless asked)."""
    env = os.environ if environ is None else environ
    return env.get(CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")


def installed() -> bool:
    return importlib.util.find_spec("opentelemetry.sdk") is not None and importlib.util.find_spec(
        "opentelemetry.exporter.otlp.proto.http") is not None


def check_installed() -> None:
    if not installed():
        raise RLMError(f"Tracing needs the OpenTelemetry SDK and its OTLP exporter, which are not installed: "
                       f"{INSTALL_HINT}.")


def tracer() -> Any:
    """The tracer runs report to (the provider and its exporter made on first use)."""
    global _provider
    with _lock:
        if _provider is None:
            _provider = _make_provider()
        return _provider.get_tracer("rlm_kernel")


def flush(timeout_s: float = FLUSH_S) -> None:
    """Send the spans finished so far (a root run has ended)."""
    provider = _provider
    if provider is not None:
        provider.force_flush(int(timeout_s * 1000))


def _make_provider() -> Any:
    check_installed()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from .._version import __version__

    # Resource.create also reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, which win.
    resource = Resource.create({"service.name": SERVICE_NAME, "service.version": __version__})
    provider = TracerProvider(resource=resource)  # flushed and shut down at exit (its own atexit)
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    return provider


def _exporter() -> Any:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol == "grpc":
        if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
            raise RLMError(f"OTEL_EXPORTER_OTLP_PROTOCOL is grpc but the gRPC exporter is not installed: "
                           f"{INSTALL_HINT}, or use http/protobuf.")
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    if protocol not in ("http/protobuf", "http"):
        raise RLMError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported; use http/protobuf or grpc.")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # reads the endpoint (adding /v1/traces), headers and timeout from the environment


__all__ = ["CONTENT_ENV", "DEFAULT_ENDPOINT", "ENDPOINT_ENV", "INSTALL_HINT", "check_installed", "content_on",
           "flush", "installed", "tracer", "tracing_on"]
