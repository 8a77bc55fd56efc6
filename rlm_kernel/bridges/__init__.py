"""Bridges to the tools around us, entry points beside ``serve/`` and
``batch/``:

- the RLM as an MCP tool for coding agents: ``mcp_server.py`` (``rlm-kernel
  mcp``, the official SDK's server over stdio or streamable HTTP) and
  ``mcp_tool.py`` (the ``rlm_run`` tool: its arguments, the run, its result);
- other libraries' runs opened as trajectory notebooks (``rlm-kernel
  import``): ``rlms_log.py`` (the official ``rlms`` library's JSONL logs),
  ``dspy_trajectory.py`` (``dspy.RLM`` trajectories), ``imported.py`` (the
  notebook both become), ``import_command.py`` (the command).

Runs as OpenTelemetry traces are a sink every entry point gets
(``sinks/traces.py``), not a bridge here.

May import: the engine, ``api``, ``builder``, ``callers``, ``context``,
``sinks/``, ``export/`` and leaf modules. Nothing imports them but ``cli.py``.
"""
