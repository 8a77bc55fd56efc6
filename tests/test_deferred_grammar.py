"""The IRI grammar that importing nbformat would build (jsonschema's format
checks import rfc3987_syntax, ~1.5 s) is built, in the processes we start,
only when a check uses it; a check that is made answers as the real module."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from _helpers import repl

IRIS = ["http://例え.jp/パス?q=1", "http://exa mple.com", "not an iri", "https://example.com/a#b", "urn:isbn:0451450523"]

PROBE = """
import json, sys
{start}
built_at_start = "rfc3987_syntax.syntax_helpers" in sys.modules
import nbformat, jsonschema
built_by_nbformat = "rfc3987_syntax.syntax_helpers" in sys.modules
answers = [jsonschema.FormatChecker().conforms(iri, "iri") for iri in {iris!r}]
print(json.dumps([built_at_start, built_by_nbformat, answers, type(sys.modules["rfc3987_syntax"]).__name__]))
"""


def probe(start: str) -> list[Any]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(start=start, iris=IRIS)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_grammar_is_built_at_the_first_check_and_answers_as_the_real_one() -> None:
    plain = probe("")
    deferred = probe("from rlm_kernel._deferred_grammar import defer_iri_grammar\ndefer_iri_grammar()")
    assert plain[:2] == [False, True]  # without the stand-in, importing nbformat builds it
    assert deferred[:2] == [False, False]
    assert deferred[2] == plain[2] and True in plain[2] and False in plain[2]
    assert deferred[3] == "module"  # the first check put the real module in the stand-in's place


def test_a_local_batch_worker_defers_it() -> None:
    started = probe("from rlm_kernel.batch.workers import start_local_worker\nstart_local_worker()")
    assert started[:2] == [False, False]


def test_a_cli_run_that_writes_its_notebook_never_builds_it(tmp_path, server) -> None:
    srv = server(root=[repl("print(len(context))"), "FINAL(done)"])
    (tmp_path / "context.txt").write_text("some context text " * 50)
    code = (
        "import sys\nfrom rlm_kernel.cli import main\n"
        f"code = main(['run', '--context', {str(tmp_path / 'context.txt')!r}, '--query', 'How long is it?',"
        f" '--model', 'openai/root-model', '--sub-model', 'openai/sub-model', '--api-base', {srv.url!r},"
        f" '-o', {str(tmp_path / 'run.ipynb')!r}, '--quiet'])\n"
        "print(code, 'rfc3987_syntax.syntax_helpers' in sys.modules, type(sys.modules['rfc3987_syntax']).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-3:] == ["0", "False", "_StandIn"], (done.stdout, done.stderr)
    assert (tmp_path / "run.ipynb").exists()


def test_the_rlm_kernel_defers_it(kernel) -> None:
    kernel.execute("import sys, nbformat")
    assert kernel.value("'rfc3987_syntax.syntax_helpers' in sys.modules") == "False"
    assert kernel.value("type(sys.modules['rfc3987_syntax']).__name__") == "'_StandIn'"


def test_the_stand_in_passes_for_the_module_until_it_is_used() -> None:
    code = (
        "import importlib.util, sys\nfrom rlm_kernel._deferred_grammar import defer_iri_grammar\n"
        "defer_iri_grammar()\nimport nbformat\n"
        "spec = importlib.util.find_spec('rfc3987_syntax')\n"
        "probed = hasattr(sys.modules['rfc3987_syntax'], '__warningregistry__')  # as warnings and pytest probe\n"
        "print('built' if 'rfc3987_syntax.syntax_helpers' in sys.modules else 'deferred', spec.origin.endswith('__init__.py'))\n"
        "from rfc3987_syntax import syntax_helpers\n"
        "print(type(sys.modules['rfc3987_syntax']).__name__, syntax_helpers.is_valid_syntax('iri', 'http://a.b/c'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["deferred", "True", "module", "True"], (done.stdout, done.stderr)
