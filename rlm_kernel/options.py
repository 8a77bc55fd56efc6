"""The run options shared by ``%%rlm`` and ``rlm-kernel run``: one parser
definition, so both spell and check them the same way."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from .errors import RLMError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one sentence, no usage dump, no exit
        raise RLMError(f"{self.prog}: {message[:1].upper()}{message[1:]}.")


def whole_number(lowest: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``lowest``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"expected a number of at least {lowest}, got {text!r}")
        return value

    return parse


def real_number(lowest: float = 0.0, *, allow_lowest: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number above ``lowest`` (or equal, with ``allow_lowest``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        relation = "at least" if allow_lowest else "above"
        if not math.isfinite(value):  # nan passes every comparison below; inf is no amount of time or money
            raise argparse.ArgumentTypeError(f"expected a finite number {relation} {lowest:g}, got {text!r}")
        if value < lowest or (value == lowest and not allow_lowest):
            raise argparse.ArgumentTypeError(f"expected a number {relation} {lowest:g}, got {text!r}")
        return value

    return parse


_positive_float = real_number(0.0)


def add_run_options(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    """The run options; ``defaults=False`` leaves unset ones None (overrides)."""

    def _d(value: Any) -> Any:
        return value if defaults else None

    group = parser.add_argument_group("models")
    group.add_argument("--model", help="root model, a litellm name (default: $RLM_MODEL)")
    group.add_argument("--sub-model", help="model for sub-calls (default: $RLM_SUB_MODEL, else the root model)")
    group.add_argument("--api-base", help="OpenAI-compatible base URL for both models (default: $RLM_API_BASE)")
    group.add_argument("--sub-api-base", help="base URL for the sub-model when it differs")
    limits = parser.add_argument_group("budgets")
    limits.add_argument("--max-iterations", type=whole_number(1), default=_d(30), help="root steps (default 30)")
    limits.add_argument("--max-depth", type=whole_number(0), default=_d(1), help="rlm_query recursion depth (default 1)")
    limits.add_argument("--max-cost", type=_positive_float, help="USD for the whole run, children included")
    limits.add_argument("--max-subcalls", type=whole_number(0), help="sub-calls for the whole run")
    limits.add_argument("--max-tokens", type=whole_number(1), help="tokens (prompt + completion) for the whole run")
    limits.add_argument("--timeout", type=_positive_float, help="seconds for the whole run")
    limits.add_argument("--cell-timeout", type=_positive_float, default=_d(600.0),
                        help="seconds one generated cell may run before it is interrupted (default 600)")
    limits.add_argument("--concurrency", type=whole_number(1), default=_d(64),
                        help="sub-calls in flight at once, shared by the whole run (default 64)")
    limits.add_argument("--max-output-chars", type=whole_number(100), default=_d(10_000),
                        help="characters of each cell's output shown to the root model (default 10000)")
    trust = parser.add_argument_group("trust")
    trust.add_argument("--no-network-in-code", action="store_true", default=_d(False),
                       help="refuse network access and new processes to generated code (a guard, not a sandbox)")


def new_parser(prog: str, description: str | None = None) -> argparse.ArgumentParser:
    return _Parser(prog=prog, description=description, add_help=True, allow_abbrev=False)


def rlm_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The RLM(...) keyword arguments named by parsed options."""
    names = ("model", "sub_model", "api_base", "sub_api_base", "max_iterations", "max_depth", "max_cost",
             "max_subcalls", "max_tokens", "timeout", "cell_timeout", "concurrency", "max_output_chars",
             "no_network_in_code")
    kwargs = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    return kwargs
