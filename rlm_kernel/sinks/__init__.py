"""Sinks: where a run reports what happens. Each implements the engine's
:class:`~rlm_kernel.engine.trajectory.sink.Sink`: the notebook file, the run journal,
the live notebook in JupyterLab, the ``%%rlm`` cell's own output, the
terminal, the sub-call views and the kernel session's replay book."""
