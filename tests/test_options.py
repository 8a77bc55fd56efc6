"""The options model: one declaration (engine/runs/options.py) from which the
command line, %%rlm, RLM(...), the limits, the query cell and its parsing
back all derive."""

from __future__ import annotations

import inspect
import math

import pytest

from rlm_kernel import RLM, cli
from rlm_kernel.engine.runs import options
from rlm_kernel.engine.runs.options import (
    BY_NAME,
    OPTIONS,
    non_defaults,
    parse_query_cell,
    query_cell_source,
    resolve,
)
from rlm_kernel.errors import RLMError
from rlm_kernel.kernel.cell_runs import run_parser
from rlm_kernel.kernel.continuing import continue_parser

FLAGS = [o for o in OPTIONS if o.flag]


def _help(parser) -> str:
    return parser.format_help()


def _run_help(command: str = "run") -> str:
    commands = cli._parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    return commands[command].format_help()


@pytest.mark.parametrize("surface", ["rlm-kernel run", "%%rlm", "%rlm continue", "rlm-kernel serve",
                                     "rlm-kernel batch"])
def test_every_flag_option_is_a_flag_of_every_surface(surface: str) -> None:
    text = {"rlm-kernel run": _run_help, "%%rlm": lambda: _help(run_parser()),
            "%rlm continue": lambda: _help(continue_parser()), "rlm-kernel serve": lambda: _run_help("serve"),
            "rlm-kernel batch": lambda: _run_help("batch")}[surface]()
    for option in FLAGS:
        assert option.flag_name in text, (surface, option.flag_name)
    for option in OPTIONS:
        # serve's own --api-key is the key its clients send, not the provider key of the run option
        if not option.flag and not (surface == "rlm-kernel serve" and option.name == "api_key"):
            assert option.flag_name not in text, (surface, option.flag_name)


def test_every_option_is_a_keyword_of_rlm_with_its_default() -> None:
    params = inspect.signature(RLM.__init__).parameters
    for option in OPTIONS:
        assert option.name in params, option.name
        assert params[option.name].default == option.default, option.name
    rlm = RLM(model="openai/x", api_base="http://127.0.0.1:9/v1", max_iterations=7, check=False)
    assert rlm.options.max_iterations == 7
    assert rlm.options.cell_timeout == BY_NAME["cell_timeout"].default


def test_an_unknown_keyword_is_refused_like_python_does() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_iteration'"):
        RLM(model="openai/x", max_iteration=3)


def test_the_limits_are_the_options_marked_limit() -> None:
    limits = resolve({"model": "openai/x"}, environ={}).limits()
    assert list(limits) == [o.name for o in OPTIONS if o.limit]
    # the notebook's record of a run keeps these ten, as before the options model
    assert list(limits) == ["max_iterations", "max_depth", "max_cost", "max_subcalls", "max_tokens", "timeout",
                            "cell_timeout", "concurrency", "max_output_chars", "no_network_in_code"]


def test_defaults_come_from_the_environment_then_the_option_they_follow() -> None:
    env = {"RLM_MODEL": "openai/root", "RLM_API_BASE": "http://h/v1"}
    opts = resolve({}, environ=env)
    assert (opts.model, opts.sub_model, opts.api_base, opts.sub_api_base) == (
        "openai/root", "openai/root", "http://h/v1", "http://h/v1")
    opts = resolve({"sub_model": "openai/sub"}, environ={**env, "RLM_SUB_API_BASE": "http://s/v1"})
    assert (opts.sub_model, opts.sub_api_base) == ("openai/sub", "http://s/v1")


def test_the_query_cell_writes_what_is_not_default_and_reads_it_back() -> None:
    opts = resolve({"model": "openai/root", "sub_model": "openai/sub", "api_base": "http://h/v1",
                    "max_iterations": 5, "cell_timeout": 30.0, "max_cost": 0.25, "no_network_in_code": True,
                    "api_key": "test-secret-value-0043"}, environ={})
    source = query_cell_source(opts, "How many?\nReally.")
    first = source.splitlines()[0]
    assert first == ("%%rlm --model openai/root --sub-model openai/sub --api-base http://h/v1 "
                     "--max-iterations 5 --max-cost 0.25 --cell-timeout 30 --no-network-in-code")
    assert "test-secret" not in source
    query, given = parse_query_cell(source)
    assert query == "How many?\nReally."
    assert given == non_defaults(opts)
    assert resolve(given, environ={}).limits() == opts.limits()


def test_a_sub_model_equal_to_the_root_model_is_not_written() -> None:
    opts = resolve({"model": "openai/root", "sub_model": "openai/root"}, environ={})
    assert query_cell_source(opts, "q") == "%%rlm --model openai/root\nq"


def test_parsing_a_query_cell_leaves_out_other_flags_and_refuses_bad_values() -> None:
    assert parse_query_cell("%%rlm --fresh --approve --output x.ipynb\nq") == ("q", {})
    assert parse_query_cell("no magic here") == ("no magic here", {})
    with pytest.raises(RLMError, match="--max-iterations"):
        parse_query_cell("%%rlm --max-iterations lots\nq")


def test_secrets_never_show() -> None:
    opts = resolve({"model": "openai/x", "api_key": "test-secret-value-0042"}, environ={})
    assert "test-secret" not in repr(opts)
    assert "api_key" not in non_defaults(opts)
    assert "test-secret" not in repr(RLM(model="openai/x", api_key="test-secret-value-0042", check=False))


@pytest.mark.parametrize("name, value, message", [
    ("max_iterations", 0, "--max-iterations must be a whole number of at least 1, got 0"),
    ("max_iterations", 2.5, "--max-iterations must be a whole number"),
    ("max_iterations", True, "--max-iterations must be a whole number"),
    ("max_cost", math.nan, "--max-cost must be a positive finite number"),
    ("timeout", 0, "--timeout must be a positive finite number"),
    ("retry_base_delay", -1, "--retry-base-delay must be a finite number at least 0"),
    ("model", 3, "--model must be a str"),
    ("no_network_in_code", "yes", "--no-network-in-code must be True or False"),
])
def test_a_bad_python_value_is_refused_in_one_sentence(name: str, value: object, message: str) -> None:
    with pytest.raises(RLMError, match=message):
        resolve({name: value}, environ={})


@pytest.mark.parametrize("flag, text, message", [
    ("--max-iterations", "0", "expected a number of at least 1, got '0'"),
    ("--concurrency", "many", "expected a whole number, got 'many'"),
    ("--max-cost", "-1", "expected a number above 0, got '-1'"),
    ("--timeout", "inf", "expected a finite number above 0, got 'inf'"),
])
def test_a_bad_flag_is_refused_in_one_sentence(flag: str, text: str, message: str) -> None:
    parser = options.new_parser("%%rlm")
    options.add_arguments(parser)
    with pytest.raises(RLMError, match=f"^%%rlm: Argument {flag}: {message}\\.$"):
        parser.parse_args([flag, text])


def test_a_command_line_gives_only_what_it_says() -> None:
    parser = options.new_parser("x")
    options.add_arguments(parser)
    assert options.given(parser.parse_args([])) == {}
    assert options.given(parser.parse_args(["--max-depth", "2", "--no-network-in-code"])) == {
        "max_depth": 2, "no_network_in_code": True}
