"""A context loaded from files reaches a sandboxed run's confined kernel as
those files, read-only, and is loaded there with the engine's own loader
(``sandbox/context_files.py``): a file in a hidden place is bound at its own
path when the run names it before the start, a value that is not what the
files hold is passed through a file instead, never a silent wrong context."""

from __future__ import annotations

import errno

import pytest
from _helpers import cell_text, cells_by_role, repl, require_bubblewrap

from rlm_kernel.testing.server import Script


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()


def _probe(path, sibling) -> str:
    return repl(
        "import os\n"
        f"p = {str(path)!r}\n"
        "print('visible', os.path.exists(p), context == open(p).read())\n"
        "try:\n"
        "    open(p, 'a').write('changed')\n"
        "    print('wrote')\n"
        "except OSError as error:\n"
        "    print('refused', error.errno)\n"
        f"print('sibling', os.path.exists({str(sibling)!r}))\n"
        "print('from', __rlm_sandbox__.context_from)")


def test_a_context_file_in_a_hidden_place_is_bound_read_only_and_loaded_inside(server, make_rlm, tmp_path):
    assert str(tmp_path).startswith("/tmp/")  # hidden from the confined kernel but for what is bound
    folder, data = tmp_path / "work", tmp_path / "data"
    data.mkdir()
    doc, secret = data / "doc.txt", data / "other.txt"
    doc.write_text("the context, in a file of its own\n" * 100)
    secret.write_text("a file beside it, never named")
    srv = server(Script(root=[_probe(doc, secret), "FINAL(done)"]))
    result = make_rlm(srv, sandbox=True, sandbox_dir=str(folder)).completion(
        doc.read_text(), "Look.", sources=[str(doc)])
    assert result.reason == "final", result.error
    text = cell_text(cells_by_role(result.notebook, "code")[0])
    assert "visible True True" in text, text
    assert f"refused {errno.EROFS}" in text  # the person's file cannot be written from inside
    assert "sibling False" in text  # only the named file is bound, not its folder
    assert "from files" in text
    assert doc.read_text() == "the context, in a file of its own\n" * 100


@pytest.mark.parametrize("source", ["a file that holds something else", "a label, not a path"])
def test_a_context_that_is_not_what_its_sources_hold_is_passed_as_the_value(server, make_rlm, tmp_path, source,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)  # a label read as a path lands in /tmp, hidden from the confined kernel
    doc = tmp_path / "doc.txt"
    doc.write_text("what the file says")
    label = str(doc) if source.startswith("a file") else "the caller's own words for it"
    srv = server(Script(root=[repl("print(repr(context), __rlm_sandbox__.context_from)"), "FINAL(done)"]))
    result = make_rlm(srv, sandbox=True, sandbox_dir=str(tmp_path / "work")).completion(
        "what the caller passed", "Look.", sources=[label])
    assert result.reason == "final", result.error
    assert "'what the caller passed' value" in cell_text(cells_by_role(result.notebook, "code")[0])
