"""Batch tasks as Ray tasks: on a local Ray instance started here, or on a
running cluster (``ray.init(address=...)``). Every node needs rlm-kernel
installed, the model keys in its environment and, for tasks with
``context`` paths, those paths (shared storage); ``context_text`` travels
with the task. Each task returns its notebook to the driver, which writes it."""

from __future__ import annotations

import importlib.util
import os
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
                    ray.init(address=self.address, **settings)
            except Exception as error:  # noqa: BLE001 - Ray's own reasons, said in one sentence
                where = "a local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
                raise RLMError(f"Cannot start {where}: {str(error).splitlines()[0] if str(error) else error}.") \
                    from None
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


__all__ = ["RayRunner"]
