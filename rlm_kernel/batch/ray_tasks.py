"""Batch tasks as Ray tasks: on a local Ray instance started here, or on a
running cluster (``ray.init(address=...)``). Every node needs rlm-kernel
installed, the model keys in its environment and, for tasks with
``context`` paths, those paths (shared storage); ``context_text`` travels
with the task. Each task returns its notebook to the driver, which writes it.

A cluster started with token auth (``RAY_AUTH_MODE=token``) takes this
machine's token as Ray reads it: ``RAY_AUTH_MODE=token`` and
``RAY_AUTH_TOKEN`` (or ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``) in
the environment of ``rlm-kernel batch``; the workers are the cluster's and
have the token their node was started with. Nothing of ours carries it."""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import RLMError
from .tasks import Task, failed_line, notebook_path

# Settings the workers need that are not secrets (keys stay in each node's environment).
SHARED_ENV = ("LITELLM_LOCAL_MODEL_COST_MAP", "EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "RLM_MODEL",
              "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_SUB_API_BASE", "RLM_ROUTER", "RLM_JSON_STEPS")


class RayRunner:
    def __init__(self, address: str | None, workers: int | None) -> None:
        self.address = address  # None: a local instance
        self.workers = workers
        self.started = False

    def __enter__(self) -> RayRunner:
        if importlib.util.find_spec("ray") is None:
            raise RLMError("--ray needs Ray, which is not installed: pip install 'rlm-kernel[ray]'.")
        import ray

        if not ray.is_initialized():
            env = {name: os.environ[name] for name in SHARED_ENV if os.environ.get(name)}
            env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            settings: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                        "runtime_env": {"env_vars": env}}
            try:
                if self.address is None:
                    ray.init(num_cpus=self.workers or os.cpu_count() or 1, **settings)
                else:
                    check_listening(self.address)
                    check_token(self.address)
                    ray.init(address=self.address, **settings)
            except RLMError:
                raise
            except Exception as error:  # noqa: BLE001 - Ray's own reasons, said in one sentence
                raise RLMError(why_not(error, self.address)) from None
            self.started = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            import ray

            ray.shutdown()

    def run(self, todo: list[Task], given: dict[str, Any], out: Path, *,
            check: bool = False) -> Iterator[dict[str, Any]]:
        """Results lines as tasks end, with at most ``workers`` (else the
        cluster's CPUs) tasks in flight."""
        import ray

        from .workers import run_task

        remote = ray.remote(run_task).options(num_cpus=1, max_retries=0)
        limit = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        queue = list(reversed(todo))
        flying: dict[Any, Task] = {}
        try:
            while queue or flying:
                while queue and len(flying) < limit:
                    task = queue.pop()
                    ref = remote.remote(task.as_dict(), given, str(notebook_path(out, task.id)),
                                        return_notebook=True, check=check)
                    flying[ref] = task
                ready, _ = ray.wait(list(flying), num_returns=1)
                task = flying.pop(ready[0])
                try:
                    line = ray.get(ready[0])
                    if line is not None:
                        yield line
                except Exception as error:  # noqa: BLE001 - the worker died or Ray failed the task
                    yield failed_line(task.id, f"the Ray task failed: {str(error).splitlines()[0]}")
        except KeyboardInterrupt:
            for ref in flying:
                ray.cancel(ref)
            raise


def check_listening(address: str, timeout: float = 10.0) -> None:
    """Refuse at once an address where nothing listens: Ray would try again
    for minutes (20 attempts of ~35 s each)."""
    if address == "auto":
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return  # a form we do not know: Ray says what it thinks of it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout).close()
    except OSError as error:
        raise RLMError(f"Nothing answers at {address} ({error.strerror or error}): start the cluster with "
                       "`ray start --head` and give its address (HOST:6379 by default, or ray://HOST:10001).") \
            from None


def check_token(address: str, wait: float = 5.0) -> None:
    """Refuse at once a cluster that will not take this machine's token: Ray
    connects again for ~20 s before it says so. Ray's own checks, as
    ``ray.init`` makes them for a running cluster: a token is there when
    token auth is on, then one connection to the cluster's GCS with it. Any
    other outcome (connected, another error, no answer within ``wait``) is
    left to ``ray.init``."""
    if address == "auto" or address.startswith("ray://"):
        return
    try:
        from ray._private.authentication.authentication_token_setup import (
            ensure_token_if_auth_enabled,
        )
        from ray._raylet import GcsClient
    except ImportError:  # another Ray than the one this was written for: ray.init says it all
        return
    try:
        # Before GcsClient: with token auth on and no token, Ray's C++ side aborts the process.
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    except Exception as error:  # noqa: BLE001 - Ray's AuthenticationError, said in one sentence
        raise RLMError(why_not(error, address)) from None
    failed: list[BaseException] = []

    def connect() -> None:
        try:
            GcsClient(address=address)
        except Exception as error:  # noqa: BLE001 - read below
            failed.append(error)

    # A daemon thread: a listener that is no Ray GCS keeps the client waiting (~40 s).
    probe = threading.Thread(target=connect, name="rlm-ray-token-check", daemon=True)
    probe.start()
    probe.join(wait)
    if failed and _token_refused(failed[0]):
        raise RLMError(why_not(failed[0], address))


def _token_refused(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return "AuthenticationError" in text or "InvalidAuthToken" in text


def why_not(error: BaseException, address: str | None) -> str:
    """One sentence for a Ray instance that would not start or a cluster that
    refused us. Ray keeps the cause of a refused connection as text in the
    chain of exceptions (the last attempt's traceback), hence the text search."""
    if address is None:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"Cannot start a local Ray instance: {first}."
    chain, seen = [], 0
    cause: BaseException | None = error
    while cause is not None and seen < 10:
        chain.append(f"{type(cause).__name__}: {cause}")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    text = "\n".join(chain)
    if "AuthenticationError" in text or "InvalidAuthToken" in text:
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            return (f"The Ray cluster at {address} asks for its auth token: set RAY_AUTH_MODE=token and "
                    "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's token.")
        if "no authentication token was found" in text:
            return (f"RAY_AUTH_MODE is token but no token was found: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) "
                    f"to the token of the Ray cluster at {address}.")
        return (f"The Ray cluster at {address} refused this machine's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                "or ~/.ray/auth_token): set the token the cluster was started with.")
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"Cannot connect to the Ray cluster at {address}: {first}."


__all__ = ["RayRunner", "check_listening", "check_token", "why_not"]
