"""The run options, declared once.

Every option a run takes is one :class:`Option` in :data:`OPTIONS`: its
type, default, bounds and help. Everything else derives from that table:
the flags of ``rlm-kernel run``, ``%%rlm`` and ``%rlm continue``
(:func:`add_arguments`), the keywords of ``RLM(...)`` (:func:`resolve`), the
limits a run enforces and records (:meth:`RunOptions.limits`), the flags
written into a query cell (:func:`query_cell_source`) and their parsing back
(:func:`parse_query_cell`). To add an option, add a line to ``OPTIONS`` and
use it where it acts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import RLMError
from ..execution import tools as _tools


@dataclass(frozen=True)
class Option:
    name: str  # the keyword; the flag is --name-with-dashes
    kind: str  # "text" | "whole" | "real" | "flag" | "tools" (a list of functions or their names)
    default: Any = None
    help: str = ""
    group: str = "budgets"  # the heading in --help: one of GROUPS
    lowest: float = 0  # numbers: the smallest value allowed
    above: bool = False  # real numbers: must be above `lowest`, not equal to it
    env: str | None = None  # unset: the value of this environment variable
    same_as: str | None = None  # unset (and no env): the value of this option
    flag: bool = True  # a command-line and %%rlm flag (False: Python keyword only)
    secret: bool = False  # never shown, written or recorded
    limit: bool = False  # recorded among the run's limits in the notebook
    choices: tuple[str, ...] = ()  # text options: the values allowed (empty: any)

    @property
    def flag_name(self) -> str:
        return "--" + self.name.replace("_", "-")

    def problem(self, value: Any) -> str | None:
        """What is wrong with a Python value for this option (None: nothing)."""
        if value is None:
            return None
        if self.kind == "text":
            if not isinstance(value, str):
                return f"must be a str, got {value!r}"
            return None if not self.choices or value in self.choices else f"must be {' or '.join(self.choices)}, got {value!r}"
        if self.kind == "flag":
            return None if isinstance(value, bool) else f"must be True or False, got {value!r}"
        if self.kind == "tools":
            return _tools.value_problem(value)
        if self.kind == "whole":
            if isinstance(value, bool) or not isinstance(value, int) or value < self.lowest:
                return f"must be a whole number of at least {self.lowest:g}, got {value!r}"
            return None
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or value < self.lowest or (self.above and value == self.lowest)):
            if self.above and self.lowest == 0:
                return f"must be a positive finite number, got {value!r}"
            return f"must be a finite number {'above' if self.above else 'at least'} {self.lowest:g}, got {value!r}"
        return None

    def parse(self, text: str) -> Any:
        """A flag's text as a value (an argparse ``type``: says what is wrong in its words)."""
        if self.kind == "text":
            if self.choices and text not in self.choices:
                raise argparse.ArgumentTypeError(f"expected {' or '.join(self.choices)}, got {text!r}")
            return text
        if self.kind == "tools":
            return _tools.parse_flag(text)
        if self.kind == "whole":
            try:
                value: Any = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
            if value < self.lowest:
                raise argparse.ArgumentTypeError(f"expected a number of at least {self.lowest:g}, got {text!r}")
            return value
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        relation = "above" if self.above else "at least"
        if not math.isfinite(value):  # nan passes every comparison; inf is no amount of time or money
            raise argparse.ArgumentTypeError(f"expected a finite number {relation} {self.lowest:g}, got {text!r}")
        if value < self.lowest or (self.above and value == self.lowest):
            raise argparse.ArgumentTypeError(f"expected a number {relation} {self.lowest:g}, got {text!r}")
        return value

    def text(self, value: Any) -> str:
        """How a value is written as a flag's argument."""
        if self.kind == "tools":
            return ",".join(_tools.spec_of(tool) for tool in value)
        return f"{value:g}" if isinstance(value, float) and value == int(value) and abs(value) < 1e15 else str(value)


OPTIONS: tuple[Option, ...] = (
    Option("model", "text", group="models", env="RLM_MODEL",
           help="root model, a litellm name (default: $RLM_MODEL)"),
    Option("sub_model", "text", group="models", env="RLM_SUB_MODEL", same_as="model",
           help="model for sub-calls (default: $RLM_SUB_MODEL, else the root model)"),
    Option("api_base", "text", group="models", env="RLM_API_BASE",
           help="OpenAI-compatible base URL for both models (default: $RLM_API_BASE)"),
    Option("sub_api_base", "text", group="models", env="RLM_SUB_API_BASE", same_as="api_base",
           help="base URL for the sub-model when it differs"),
    Option("router", "text", group="models", env="RLM_ROUTER",
           help="litellm Router config (YAML): the models' deployments, rate limits, retries, cooldowns "
                "(default: $RLM_ROUTER)"),
    Option("api_key", "text", group="models", flag=False, secret=True,
           help="key for the root model (default: the provider's environment variable)"),
    Option("sub_api_key", "text", group="models", flag=False, secret=True,
           help="key for the sub-model (default: api_key when both use the same server)"),
    Option("max_iterations", "whole", 30, "root steps (default 30)", lowest=1, limit=True),
    Option("max_depth", "whole", 1, "rlm_query recursion depth (default 1)", limit=True),
    Option("max_cost", "real", None, "USD for the whole run, children included", above=True, limit=True),
    Option("max_subcalls", "whole", None, "sub-calls for the whole run", limit=True),
    Option("max_tokens", "whole", None, "tokens (prompt + completion) for the whole run", lowest=1, limit=True),
    Option("timeout", "real", None, "seconds for the whole run", above=True, limit=True),
    Option("cell_timeout", "real", 600.0, "seconds one generated cell may run before it is interrupted (default 600)",
           above=True, limit=True),
    Option("concurrency", "whole", 64, "sub-calls in flight at once, shared by the whole run (default 64)",
           lowest=1, limit=True),
    Option("max_history_tokens", "whole", None, "tokens the root model's history may reach before its older steps are "
           "compacted (default: 85 percent of the model's input window per litellm)", group="history", lowest=1000),
    Option("compact_with", "text", "root", "the model that summarises compacted steps: root or sub (default root)",
           group="history", choices=("root", "sub")),
    Option("max_output_chars", "whole", 10_000,
           "characters of each cell's output shown to the root model (default 10000)", lowest=100, limit=True),
    Option("no_network_in_code", "flag", False,
           "refuse network access and new processes to generated code (a guard, not a sandbox)",
           group="trust", limit=True),
    Option("sandbox", "flag", False,
           "run the generated code in a confined execution kernel (bubblewrap: no network, read-only files "
           "but the notebook's folder, no secrets in its environment; sub-calls still work)", group="trust"),
    Option("sandbox_dir", "text", None, "the one folder sandboxed code may write (default: the notebook's folder, "
           "else the current one)", group="trust"),
    Option("sandbox_memory", "whole", 2048, "MB of memory the sandboxed execution kernel may use (default 2048)",
           group="trust", lowest=256),
    Option("sandbox_cpu", "real", 300.0, "CPU seconds one sandboxed cell may use (default 300)", group="trust",
           above=True),
    Option("executor", "text", "local", "where the generated code runs: local (this process or kernel), sandbox (as "
           "--sandbox) or gateway (a kernel a Jupyter gateway starts: a remote machine, a Kubernetes pod, a container; "
           "sub-calls and keys stay here) (default local)", group="where code runs",
           choices=("local", "sandbox", "gateway")),
    Option("gateway_url", "text", None, "the Jupyter Enterprise Gateway or Kernel Gateway for --executor gateway "
           "(default: $RLM_GATEWAY_URL)", group="where code runs", env="RLM_GATEWAY_URL"),
    Option("gateway_kernel", "text", None, "the gateway's kernelspec the namespace runs in (default: "
           "$RLM_GATEWAY_KERNEL, else python3)", group="where code runs", env="RLM_GATEWAY_KERNEL"),
    Option("gateway_token", "text", None, group="where code runs", flag=False, secret=True,
           env="RLM_GATEWAY_TOKEN", help="the gateway's auth token (default: $RLM_GATEWAY_TOKEN, else "
                                         "$JUPYTER_GATEWAY_AUTH_TOKEN); never written or shown"),
    Option("tools", "tools", None, group="tools",
           help="functions the root model may call in its code: names in the notebook's namespace "
                "(search_index,lookup) or module:function (repeatable)"),
    Option("vision", "text", "auto", "show the root model the images its cells display: auto (when litellm's model "
           "info says the model supports vision), on or off (default auto)", group="vision", choices=("auto", "on", "off")),
    Option("max_images_per_step", "whole", 4, "images shown to the root model after one step, each downscaled to at "
           "most 1024 px on its long side (default 4)", group="vision"),
    Option("no_stream", "flag", False,
           "read each root reply whole instead of streaming it (streamed: cells appear as the model writes "
           "and a code block runs once its closing fence arrives)", group="calls"),
    Option("max_retries", "whole", 4, "retries of a failed model call (default 4)", group="calls", flag=False),
    Option("retry_base_delay", "real", 0.5, "seconds before the first retry, doubled each time (default 0.5)",
           group="calls", flag=False),
    Option("request_timeout", "real", 600.0, "seconds one model call may take (default 600)", group="calls",
           above=True, flag=False),
)

BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
GROUPS = ("models", "budgets", "history", "trust", "where code runs", "tools", "vision", "calls")


def _run_options_class() -> type:
    fields = [(o.name, Any, dataclasses.field(default=o.default, repr=not o.secret)) for o in OPTIONS]
    return dataclasses.make_dataclass("RunOptions", fields, frozen=True, namespace={
        "__doc__": "The resolved value of every option of a run (see OPTIONS).",
        "limits": lambda self: {o.name: getattr(self, o.name) for o in OPTIONS if o.limit},
        "given": lambda self: {o.name: getattr(self, o.name) for o in OPTIONS if getattr(self, o.name) is not None},
        "non_defaults": lambda self: non_defaults(self),
    })


RunOptions: Any = _run_options_class()


def resolve(given: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None,
            caller: str = "RLM()") -> Any:
    """The :class:`RunOptions` for the ``given`` values (None or missing:
    unset); unset options take their environment variable, then the option
    they follow, then their default. A value of the wrong kind is refused
    in one sentence naming its flag."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise TypeError(f"{caller} got an unexpected keyword argument {unknown[0]!r}")
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in OPTIONS:
        value = given.get(option.name)
        problem = option.problem(value)
        if problem is not None:
            raise RLMError(f"{option.flag_name} {problem}.")
        if value is None and option.env:
            value = environ.get(option.env) or None
        if value is None and option.same_as:
            value = values[option.same_as]
        if option.kind == "tools":
            value = (tuple(value) or None) if value is not None else None  # no tools: unset
        values[option.name] = option.default if value is None else value
    return RunOptions(**values)


def non_defaults(options: Any) -> dict[str, Any]:
    """The written options whose value is not what they would be unset: a
    model always, a sub-model only when it differs from the root model,
    limits when they differ from their defaults. Secrets never."""
    written: dict[str, Any] = {}
    for option in OPTIONS:
        if not option.flag or option.secret:
            continue
        value = getattr(options, option.name)
        unset = getattr(options, option.same_as) if option.same_as else option.default
        if value is not None and value != unset:
            written[option.name] = value
    return written


def flags(values: Mapping[str, Any]) -> list[str]:
    """Command-line words for option values (``--max-iterations 5``, ``--no-network-in-code``)."""
    words: list[str] = []
    for name, value in values.items():
        option = BY_NAME[name]
        if option.kind == "flag":
            if value:
                words.append(option.flag_name)
        elif value is not None:
            words += [option.flag_name, option.text(value)]
    return words


# -- the command line and %%rlm ---------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one sentence, no usage dump, no exit
        raise RLMError(f"{self.prog}: {message[:1].upper()}{message[1:]}.")


def new_parser(prog: str, description: str | None = None) -> argparse.ArgumentParser:
    return _Parser(prog=prog, description=description, add_help=True, allow_abbrev=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The run options as flags. Every default is None, so what a command
    line gave can be told from what it left out (:func:`given`)."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS
              if any(o.flag and o.group == name for o in OPTIONS)}
    for option in OPTIONS:
        if not option.flag:
            continue
        group = groups[option.group]
        if option.kind == "flag":
            group.add_argument(option.flag_name, action="store_true", default=None, help=option.help)
        elif option.kind == "tools":
            group.add_argument(option.flag_name, action="extend", type=option.parse, default=None, help=option.help,
                               metavar="NAMES")
        else:
            group.add_argument(option.flag_name, type=option.parse, default=None, help=option.help,
                               metavar=option.name.upper() if option.kind == "text" else None)


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The run options a parsed command line gave."""
    return {o.name: getattr(args, o.name) for o in OPTIONS
            if o.flag and getattr(args, o.name, None) is not None}


def whole_number(lowest: int) -> Callable[[str], int]:
    """An argparse type for other commands' numbers: a whole number of at least ``lowest``."""
    return Option("_", "whole", lowest=lowest).parse


def real_number(lowest: float = 0.0, *, allow_lowest: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number above ``lowest`` (or equal, with ``allow_lowest``)."""
    return Option("_", "real", lowest=lowest, above=not allow_lowest).parse


# -- the query cell ---------------------------------------------------------------

MAGIC = "%%rlm"


def query_cell_source(options: Any, query: str, extra: Iterable[str] = ()) -> str:
    """A ``%%rlm`` cell that asks ``query`` with these options (the ones not
    at their defaults), as a run writes it into its notebook."""
    words = [*flags(non_defaults(options)), *extra]
    return " ".join([MAGIC, *(shlex.quote(w) for w in words)]) + "\n" + query


def parse_query_cell(source: str) -> tuple[str, dict[str, Any]]:
    """A ``%%rlm`` cell's query and the run options its first line gives
    (other flags, such as ``--fresh``, are not run options and are left out)."""
    first, _, body = source.partition("\n")
    if not first.startswith(MAGIC):
        return source.strip(), {}
    parser = new_parser(MAGIC)
    add_arguments(parser)
    try:
        words = shlex.split(first[len(MAGIC):])
    except ValueError as error:
        raise RLMError(f"{MAGIC}: cannot read the flags ({error}).") from None
    args, _ = parser.parse_known_args(words)
    return body.strip(), given(args)


__all__ = ["BY_NAME", "OPTIONS", "Option", "RunOptions", "add_arguments", "flags", "given", "new_parser",
           "non_defaults", "parse_query_cell", "query_cell_source", "real_number", "resolve", "whole_number"]
