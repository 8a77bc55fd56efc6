"""``rlm-kernel mcp``: the RLM as a tool for coding agents, over the Model
Context Protocol (the official ``mcp`` SDK's ``MCPServer``): stdio by
default (the client starts the server), streamable HTTP at
``http://HOST:PORT/mcp`` with ``--port``.

One tool, ``rlm_run`` (``mcp_tool.py``). Each call is an ``RLM.completion``
on a thread of its own; the step lines reach the client as progress
notifications; a client's cancellation stops the run as an interrupt does
(its notebook is written up to where it stopped). A call that cannot run,
or a run whose root model failed, comes back as a tool error in one
sentence. In stdio mode the SDK points the process's stdout at stderr while
it serves, so nothing a run prints can break the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, TypedDict

from .._version import __version__
from ..engine.runs import options
from ..engine.runs.options import whole_number
from ..errors import RLMError
from ..redaction import redact
from .mcp_tool import (
    DESCRIPTION,
    TOOL,
    StepProgress,
    ToolSettings,
    parameters,
    read_call,
    result_object,
    run_call,
)

RUN_THREADS = 8  # tool calls running at once
INSTALL_HINT = "pip install 'rlm-kernel[mcp]'"
INSTRUCTIONS = ("Call rlm_run with a question and a context (paths, URLs or text) too large to read at once. "
                "Each run leaves a trajectory notebook (the `notebook` of the result) a person can open in "
                "JupyterLab to audit the run and continue it.")


class RunAnswer(TypedDict):
    """The tool's result (its output schema)."""

    answer: str | None  # None unless reason is "final"
    reason: str  # final, max_iterations, budget, timeout, error, interrupted
    error: str | None
    steps: int
    subcalls: int
    usage: dict[str, Any]  # per model: prompt_tokens, completion_tokens, calls, cost_usd, cache reads and writes
    cost_usd: float | None
    notebook: str | None  # the trajectory notebook: open it in JupyterLab to see the run and take it over
    run_id: str


def add_mcp_parser(commands: Any) -> None:
    mcp = commands.add_parser(
        "mcp", help="serve the RLM as an MCP tool (rlm_run) for coding agents: stdio, or HTTP with --port",
        description="Serve the RLM as the MCP tool rlm_run: over stdio for a client that starts this command "
                    "(Claude Code, Cursor, Codex, Goose...), or over streamable HTTP at http://HOST:PORT/mcp with "
                    "--port. The run options below are the ceilings: a call may only tighten them.",
    )
    mcp.add_argument("--port", type=whole_number(1), default=None,
                     help="serve streamable HTTP on this port (default: stdio)")
    mcp.add_argument("--host", default="127.0.0.1", help="address for --port (default 127.0.0.1)")
    mcp.add_argument("--runs-dir", default="rlm-runs", help="folder for the runs' notebooks (default rlm-runs)")
    mcp.add_argument("--allow-model", action="append", default=[], metavar="NAME",
                     help="a model a call may choose as its model or sub-model, besides --model and --sub-model "
                          "(repeatable)")
    options.add_arguments(mcp)


def check_installed() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise RLMError(f"rlm-kernel mcp needs the MCP SDK, which is not installed: {INSTALL_HINT}.")


def run_mcp(args: argparse.Namespace) -> int:
    from ..builder import check_models

    check_installed()
    given = options.given(args)
    run_options = options.resolve(given)
    if not run_options.model:
        raise RLMError("Give the root model with --model (a litellm name, e.g. openai/gpt-4o-mini) or $RLM_MODEL.")
    check_models(run_options)
    try:
        Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RLMError(f"Cannot create the runs folder {args.runs_dir!r}: {error.strerror or error}.") from None
    settings = ToolSettings(options=given, models=tuple(args.allow_model), runs_dir=os.path.abspath(args.runs_dir))
    server = make_server(settings)
    if args.port is None:
        print(f"rlm-kernel: serving the MCP tool {TOOL} over stdio; notebooks go to {settings.runs_dir}",
              file=sys.stderr)
        server.run("stdio")
    else:
        print(f"rlm-kernel: serving the MCP tool {TOOL} at http://{args.host}:{args.port}/mcp; notebooks go to "
              f"{settings.runs_dir}", file=sys.stderr, flush=True)
        server.run("streamable-http", host=args.host, port=args.port)
    return 0


def make_server(settings: ToolSettings) -> Any:
    """The MCP server with its one tool."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("rlm-kernel", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    server.add_tool(tool_function(settings), name=TOOL, title="Recursive Language Model run",
                    description=DESCRIPTION, structured_output=True)
    return server


def tool_function(settings: ToolSettings) -> Any:
    """``rlm_run`` as the SDK takes a tool: an async function whose
    signature is the tool's arguments (from the options' declarations)."""
    import anyio
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    threads = concurrent.futures.ThreadPoolExecutor(RUN_THREADS, thread_name_prefix="rlm-mcp")

    async def rlm_run(ctx: Context, **arguments: Any) -> RunAnswer:
        try:
            call = await anyio.to_thread.run_sync(read_call, arguments, settings)  # loading files or URLs takes time
        except RLMError as error:
            raise ToolError(redact(str(error))) from None
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
        progress = StepProgress(lambda count, line: loop.call_soon_threadsafe(lines.put_nowait, (count, line)))
        future = loop.run_in_executor(threads, run_call, call, settings, progress)
        future.add_done_callback(lambda _: lines.put_nowait(None))
        try:
            while (item := await lines.get()) is not None:
                await ctx.report_progress(item[0], message=item[1])
            result = await future
        except asyncio.CancelledError:
            progress.interrupt()  # the client cancelled the call: the run stops as an interrupt stops it
            with anyio.CancelScope(shield=True):
                await asyncio.wait([future])  # ... and writes its notebook up to where it stopped
            raise
        except RLMError as error:
            raise ToolError(redact(str(error))) from None
        if result.reason == "error":
            raise ToolError(redact(f"The run ended with an error: {(result.error or '').rstrip('.')}; its "
                                   f"trajectory is {result.notebook_path}."))
        return RunAnswer(**result_object(result))  # type: ignore[typeddict-item]

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    rlm_run.__signature__ = inspect.Signature([*parameters(), context], return_annotation=RunAnswer)  # type: ignore[attr-defined]
    rlm_run.__annotations__ = {"ctx": Context, "return": RunAnswer}  # where the SDK looks for the Context
    return rlm_run


__all__ = ["INSTALL_HINT", "RunAnswer", "add_mcp_parser", "make_server", "run_mcp", "tool_function"]
