"""``rlm-kernel run`` in a subprocess, against scripted servers in this
process. The runs that import litellm (seconds each) are started together
once per module and each test checks its own; quick usage errors run inline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from _cli import start_cli
from _helpers import cell_text, cells_by_role, clean_env, repl

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

FAKE_KEY = "sk-test-FAKEKEY1234567890"
BIG = "".join(f"{i:07d}\n" for i in range(125_000))  # 1,000,000 characters
CONTEXT_TEXT = "line one\nline two\n" * 100


class CliRun:
    def __init__(self, name: str, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.cwd = cwd
        self.proc = start_cli(args, cwd, env=env)
        self._done = False

    def wait(self, timeout: float = 120) -> CliRun:
        if not self._done:
            self.stdout, self.stderr = self.proc.communicate(timeout=timeout)
            self.code = self.proc.returncode
            self._done = True
        return self

    def json(self) -> dict:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, (f"expected one JSON line on stdout, got {self.stdout[:500]!r} "
                                 f"(exit {self.code}; stderr: {self.stderr[-2000:]!r})")
        return json.loads(lines[0])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Start every litellm-importing CLI run at once; yield them by name."""
    base = tmp_path_factory.mktemp("cli")
    context = base / "context.txt"
    context.write_text(CONTEXT_TEXT, encoding="utf-8")
    servers: list[ScriptedServer] = []

    def serve(**script: object) -> str:
        srv = ScriptedServer(Script(**script)).start()
        servers.append(srv)
        return srv.url

    def common(url: str, name: str) -> list[str]:
        return ["run", "--context", str(context), "--query", "What is in it?", "--model", "openai/root-model",
                "--sub-model", "openai/sub-model", "--api-base", url, "-o", str(base / f"{name}.ipynb"), "--json"]

    started: dict[str, CliRun] = {}
    big_code = "big = ''.join(f'{i:07d}\\n' for i in range(125_000))\nprint(len(big), llm_query('check'))"
    url = serve(root=[repl(big_code), "FINAL_VAR(big)"])
    started["final"] = CliRun("final", common(url, "final"), base, clean_env())

    url = serve(root=[repl(f"print('step {i}')") for i in range(5)])
    started["no_answer"] = CliRun("no_answer", [*common(url, "no_answer"), "--max-iterations", "2"], base, clean_env())

    # A provider that echoes the key back in its error messages (as real ones do, partly).
    url = serve(
        root=[repl("r = llm_query('x')"), Reply(status=401, text=f"Incorrect API key provided: {FAKE_KEY}")],
        sub=lambda p: Reply(status=400, text=f"bad request from key {FAKE_KEY}"),
    )
    started["key"] = CliRun("key", common(url, "key"), base, clean_env(OPENAI_API_KEY=FAKE_KEY))

    # A provider without the model: a 404 with a JSON error body (no --json: the sentence on stderr).
    url = serve(root=[Reply(status=404, text="The model `root-model` does not exist or you do not have access to it.")])
    started["not_found"] = CliRun("not_found", [a for a in common(url, "not_found") if a != "--json"] + ["--quiet"],
                                  base, clean_env())

    # A sub-call the provider forbids (403): reported cleanly and not retried.
    url = serve(root=[repl("try:\n    llm_query('x')\nexcept Exception as e:\n    print('ERR', e)"), "FINAL(done)"],
                sub=lambda p: Reply(status=403, text="Project does not have access to this model."))
    forbidden = servers[-1]
    started["forbidden"] = CliRun("forbidden", common(url, "forbidden"), base, clean_env())

    yield {"base": base, "context": context, "forbidden_server": forbidden, **started}
    for run in started.values():
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
    for srv in servers:
        srv.stop()


def assert_one_line_error(run: CliRun, *needles: str) -> None:
    assert run.code == 2, (run.code, run.stderr)
    assert run.stdout.strip() == ""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("rlm-kernel")
    assert "Traceback" not in run.stderr
    for needle in needles:
        assert needle in lines[0]


def test_run_json_final(runs):
    run = runs["final"].wait()
    assert run.code == 0, run.stderr
    data = run.json()
    for key in ("answer", "reason", "iterations", "subcalls", "usage", "cost_usd", "notebook"):
        assert key in data
    assert data["reason"] == "final"
    assert data["answer"] == BIG  # the whole 1 MB answer, not a preview
    assert data["iterations"] == 2
    assert data["subcalls"] == 1
    assert data["cost_usd"] is None
    assert set(data["usage"]) == {"openai/root-model", "openai/sub-model"}
    for usage in data["usage"].values():
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert "Traceback" not in run.stderr
    path = Path(data["notebook"])
    if not path.is_absolute():
        path = run.cwd / path
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    roles = [c.metadata.rlm.role for c in nb.cells]
    assert roles[:2] == ["context", "query"] and roles[-1] == "answer"
    assert nb.cells[0].source.startswith("%rlm context ") and str(runs["context"]) in nb.cells[0].source
    code = cells_by_role(nb, "code")[0]
    assert cell_text(code).startswith("1000000 echo: check")
    assert path.stat().st_size < 200_000


def test_run_without_an_answer_exits_1(runs):
    run = runs["no_answer"].wait()
    assert run.code == 1, run.stderr
    data = run.json()
    assert data["reason"] == "max_iterations"
    assert data["answer"] is None
    assert data["iterations"] == 2
    nb = nbformat.read(str(runs["base"] / "no_answer.ipynb"), as_version=4)
    nbformat.validate(nb)
    assert nb.cells[-1].metadata.rlm.reason == "max_iterations"


def test_api_key_never_printed_or_saved(runs):
    run = runs["key"].wait()
    assert run.code == 1
    data = run.json()
    assert data["reason"] == "error"
    notebook = (runs["base"] / "key.ipynb").read_text(encoding="utf-8")
    for where, text in (("stdout", run.stdout), ("stderr", run.stderr), ("notebook", notebook)):
        assert FAKE_KEY not in text, f"the API key leaked into {where}"
        assert "FAKEKEY" not in text, f"part of the API key leaked into {where}"
    # the failures themselves were reported
    assert "SubcallError" in notebook
    assert "OPENAI_API_KEY" in data["error"]


def test_unknown_model_at_the_provider_is_one_clear_sentence(runs):
    run = runs["not_found"].wait()
    assert run.code == 1, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert "the provider has no model named 'openai/root-model'" in line and "check the model name" in line, line
    assert "does not exist or you do not have access to it" in line  # what the provider said, cleaned
    for raw in ("litellm", "NotFoundError", "OpenAIException", "{", '"error"'):
        assert raw not in line, (raw, line)
    assert line.endswith(".") and not line.endswith("..") and len(line) < 400, line


def test_provider_error_details_lose_litellms_prefixes(runs):
    key = runs["key"].wait()  # sub-calls answered 400 with a JSON body
    code = cells_by_role(nbformat.read(str(runs["base"] / "key.ipynb"), as_version=4), "code")[0]
    said = cell_text(code)
    assert "refused the request (HTTP 400): bad request from key <OPENAI_API_KEY>" in said, said
    assert "litellm" not in said and "OpenAIException" not in said and '{"error"' not in said, said
    assert key.code == 1
    forbidden = runs["forbidden"].wait()
    assert forbidden.code == 0, forbidden.stderr
    code = cells_by_role(nbformat.read(str(runs["base"] / "forbidden.ipynb"), as_version=4), "code")[0]
    said = cell_text(code)
    assert "refused the request (HTTP 403): Project does not have access to this model" in said, said
    assert "litellm" not in said and "APIError" not in said, said
    assert len(runs["forbidden_server"].calls("sub-model")) == 1  # a 403 is not retried


def test_bad_context_path_exit_2(tmp_path):
    run = CliRun("inline", ["run", "--context", str(tmp_path / "missing.txt"), "--query", "q", "--model",
                            "openai/x", "--api-base", "http://127.0.0.1:9/v1"], tmp_path, clean_env()).wait()
    assert_one_line_error(run, "missing.txt")


# -- more usage errors, through the same entry point in this process ------------------
# (``rlm_kernel.cli.main`` is what the ``rlm-kernel`` script calls; running it
# here spares a 4 s litellm import per case.)


class InProcess:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.stdout, self.stderr = code, out, err


@pytest.fixture
def cli_main(capsys, monkeypatch, tmp_path):
    from rlm_kernel.cli import main

    for name in list(os.environ):
        if name.endswith("_API_KEY") or name.startswith("RLM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    context = tmp_path / "c.txt"
    context.write_text("text")

    def run(args: list[str], **env: str) -> InProcess:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        args = [str(context) if a == "CONTEXT" else a for a in args]
        capsys.readouterr()
        code = main(args)
        captured = capsys.readouterr()
        return InProcess(code, captured.out, captured.err)

    return run


def test_unknown_model_exit_2(cli_main):
    run = cli_main(["run", "--context", "CONTEXT", "--query", "q", "--model", "nosuchprovider/some-model"],
                   OPENAI_API_KEY=FAKE_KEY)
    assert_one_line_error(run, "nosuchprovider/some-model")
    assert FAKE_KEY not in run.stderr


def test_missing_key_exit_2(cli_main):
    run = cli_main(["run", "--context", "CONTEXT", "--query", "q", "--model", "openai/gpt-4o-mini"])
    assert_one_line_error(run, "OPENAI_API_KEY")


def test_missing_keys_say_or_for_alternatives_and_and_for_keys_needed_together(cli_main, monkeypatch):
    # Gemini takes GEMINI_API_KEY or GOOGLE_API_KEY: either one is enough.
    run = cli_main(["run", "--context", "CONTEXT", "--query", "q", "--model", "gemini/gemini-2.5-flash"])
    assert_one_line_error(run, "GOOGLE_API_KEY or GEMINI_API_KEY")
    assert " and " not in run.stderr
    # Bedrock needs both of its keys.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ROLE_ARN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    run = cli_main(["run", "--context", "CONTEXT", "--query", "q", "--model", "bedrock/anthropic.claude-v2"])
    assert_one_line_error(run, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize("option, value", [
    ("--max-iterations", "abc"),
    ("--max-iterations", "0"),
    ("--max-cost", "-1"),
    ("--concurrency", "0"),
    ("--timeout", "soon"),
    ("--max-depth", "-2"),
])
def test_invalid_option_value_exit_2(cli_main, option, value):
    run = cli_main(["run", "--context", "CONTEXT", "--query", "q", "--model", "openai/x",
                    "--api-base", "http://127.0.0.1:9/v1", option, value])
    assert_one_line_error(run, option)


@pytest.mark.parametrize("args, needle", [
    (["run", "--query", "q", "--model", "openai/x"], "--context"),
    (["run", "--context", "CONTEXT", "--model", "openai/x"], "--query"),
    (["run", "--context", "CONTEXT", "--query", "q", "--no-such-flag"], "--no-such-flag"),
    (["run", "--context", "nowhere/*.txt", "--query", "q", "--model", "openai/x", "--api-base", "http://x/v1"],
     "nowhere/*.txt"),
])
def test_missing_or_bad_arguments_exit_2(cli_main, args, needle):
    assert_one_line_error(cli_main(args), needle)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["batch", "--help"], ["export", "--help"],
                                  ["run"], ["run", "--query", "What is in it?"]])
def test_help_and_usage_errors_import_neither_nbformat_nor_litellm(argv):
    # nbformat's import takes a second or more (jsonschema builds a grammar for its format checks) and litellm's
    # several: `rlm-kernel --help`, and a run missing its question or its input, answer at once.
    import subprocess
    import sys

    probe = ("import sys\nfrom rlm_kernel.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('nbformat', 'litellm', 'jsonschema') if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60,
                          env=clean_env())
    said = done.stdout if "--help" in argv else done.stderr
    assert ("usage: rlm-kernel" if "--help" in argv else "rlm-kernel: error: Give the") in said, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
