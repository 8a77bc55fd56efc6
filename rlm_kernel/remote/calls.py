"""Sub-calls made from inside the other kernel (a sandbox's or a gateway's),
as far as only JSON can carry them: images become data URLs inside (a
figure, a PIL image, bytes or a path there mean nothing here), and a
background job (``wait=False``) stays outside, its handle inside a :class:`RemoteJob` that
asks the engine outside for its state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

IMAGE_HELPERS = ("llm_query", "llm_query_batched")
JOB = "__job__"  # the name a handle's calls go out under
PAIR = "__text_and_images__"  # a (text, images) prompt of a batch, which JSON would make a list


def portable(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments with every image made a data URL."""
    if name not in IMAGE_HELPERS:
        return args, kwargs
    from rlm_kernel.engine.protocol.images import (
        load,  # Pillow is imported only for calls with images
    )

    def urls(images: Any) -> Any:
        if images is None:
            return None
        items = images if isinstance(images, (list, tuple)) else [images]
        return [load(image).data_url() for image in items]

    if name == "llm_query":
        if "images" in kwargs:
            kwargs = {**kwargs, "images": urls(kwargs["images"])}
        elif len(args) >= 4:
            args = [*args[:3], urls(args[3]), *args[4:]]
        return args, kwargs
    prompts = kwargs.get("prompts", args[0] if args else None)
    if isinstance(prompts, (list, tuple)):
        prompts = [{PAIR: [p[0], urls(p[1])]} if isinstance(p, tuple) and len(p) == 2 else p for p in prompts]
        if "prompts" in kwargs:
            kwargs = {**kwargs, "prompts": prompts}
        else:
            args = [prompts, *args[1:]]
    return args, kwargs


def native(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Outside: a batch's (text, images) pairs as the helper takes them."""
    if name != "llm_query_batched":
        return args, kwargs

    def pairs(prompts: Any) -> Any:
        if not isinstance(prompts, list):
            return prompts
        return [tuple(p[PAIR]) if isinstance(p, dict) and set(p) == {PAIR} else p for p in prompts]

    if "prompts" in kwargs:
        return args, {**kwargs, "prompts": pairs(kwargs["prompts"])}
    return ([pairs(args[0]), *args[1:]] if args else args), kwargs


class RemoteJob:
    """A background job's handle in the other kernel: ``done()``,
    ``result(timeout=None)``, ``progress`` and ``cancel()``, each asked of
    the job outside."""

    def __init__(self, job_id: int, helper: str, call_out: Callable[..., Any]) -> None:
        self._id, self.helper, self._call_out = job_id, helper, call_out

    def done(self) -> bool:
        return bool(self._call_out(JOB, [self._id, "done"], {}))

    def result(self, timeout: float | None = None) -> Any:
        __tracebackhide__ = True
        return self._call_out(JOB, [self._id, "result", timeout], {})

    @property
    def progress(self) -> tuple[int, int]:
        finished, total = self._call_out(JOB, [self._id, "progress"], {})
        return finished, total

    def cancel(self) -> bool:
        return bool(self._call_out(JOB, [self._id, "cancel"], {}))

    def __repr__(self) -> str:
        return str(self._call_out(JOB, [self._id, "repr"], {}))


class Jobs:
    """Outside: the background jobs started from inside, by number."""

    def __init__(self) -> None:
        self.jobs: dict[int, Any] = {}

    def keep(self, job: Any) -> dict[str, Any]:
        self.jobs[id(job)] = job
        return {"job": id(job), "helper": job.helper}

    def ask(self, job_id: int, what: str, *args: Any) -> Any:
        job = self.jobs.get(job_id)
        if job is None:
            raise LookupError("That background job belongs to an earlier run; start it again.")
        if what == "result":
            return job.result(*args)
        if what == "progress":
            return list(job.progress)
        if what == "repr":
            return repr(job)
        if what in ("done", "cancel"):
            return getattr(job, what)()
        raise LookupError(f"A background job has no {what!r}.")


__all__ = ["IMAGE_HELPERS", "JOB", "Jobs", "RemoteJob", "native", "portable"]
