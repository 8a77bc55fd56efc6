"""Sinks: where a run reports what happens (a notebook file, memory, the
live notebook in JupyterLab, the %%rlm cell's own output)."""

from .base import MultiSink, Sink

__all__ = ["Sink", "MultiSink"]
