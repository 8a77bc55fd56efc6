"""Documents in runs: the root model's first message describes them (kinds,
pages, sizes, the largest and smallest, tables' columns and rows, what was
skipped) and its system prompt says how to slice by page and cite; a child
run handed one document keeps its pages; ``RLM.completion`` takes paths;
``%rlm context`` shows its progress in the cell's output; a sandboxed run's
confined code gets the documents as they were loaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _documents import bible_pdf, encrypted_pdf, mixed_folder
from _helpers import Router, cell_text, cells_by_role, clean_env, repl, require_bubblewrap
from _kernel import Kernel

from rlm_kernel.testing.server import Script


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "cache"))


def test_the_root_model_is_told_what_the_documents_are(run_rlm, tmp_path):
    made = mixed_folder(tmp_path / "in")
    encrypted_pdf(tmp_path / "in" / "locked.pdf")
    result, srv = run_rlm(root=["FINAL(described)"], context=Path(tmp_path / "in"), query="What is here?")
    assert result.reason == "final"
    system, first = (m["content"] for m in srv.calls("root-model")[0]["messages"][:2])
    assert "doc.pages[11]" in system and "page_at" in system and "cite the source and page" in system
    assert first.startswith("`context` is a list of 15 documents (")
    for said in ("1 PDF", "1 DOCX", "1 PPTX", "1 EPUB", "1 HTML", "1 CSV", "1 XLSX",
                 f"{made['pdf_pages']} pages", f"{made['slides']} slides", "2 chapters", "Largest: context[",
                 "smallest: context["):
        assert said in first, (said, first)
    assert "table.csv (a pandas DataFrame: 2 rows x 2 columns (book, chapters))" in first
    assert "'Books': 2 rows x 2 columns (book, chapters)" in first and "'books': 3 rows x 2 columns" in first
    assert "red.png (an image, 64x32 image/png" in first
    assert "Skipped 1 input" in first and "locked.pdf' is an encrypted PDF" in first
    assert "Naomi" not in first  # no text of the documents, only what they are
    context_cell = result.notebook.cells[0]
    assert context_cell.metadata["rlm"]["sources"][0].endswith("bible.sqlite")  # what loads them again


def test_a_child_run_handed_a_document_keeps_its_pages(server, make_rlm, tmp_path):
    path = tmp_path / "ruth.pdf"
    pages = bible_pdf(path)
    root = [repl("where = rlm_query('On which page does Boaz first appear?', model='openai/child-model', "
                 "context=context)\nprint(where)"), "FINAL_VAR(where)"]
    child = [repl("p = context.page_at(context.index('Boaz'))\ncited = p.citation\n"
                  "print(type(context).__name__, context.kind, len(context.pages), cited)"), "FINAL_VAR(cited)"]
    srv = server(Router({"root-model": root, "child-model": child}))
    result = make_rlm(srv).completion(path, "Where is Boaz first named?")
    assert result.reason == "final", result.error
    told = srv.calls("child-model")[0]["messages"][1]["content"]
    assert told.startswith(f"`context` is one document: {path} (pdf, {pages} pages,"), told
    shown = srv.calls("child-model")[1]["messages"][-1]["content"]
    assert f"Document pdf {pages} {path}, page " in str(shown)
    number = int(result.answer_text.rsplit("page ", 1)[1])
    assert 1 <= number <= pages and result.answer_text == f"{path}, page {number}"


@pytest.fixture(scope="module")
def rlm_kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("documents-kernel")
    started = Kernel("rlm", cwd, env=clean_env(RLM_CACHE_DIR=str(cwd / "cache")))
    yield started
    started.shutdown()


def test_rlm_context_shows_its_progress_in_the_cells_output(rlm_kernel, tmp_path):
    folder = rlm_kernel.cwd / "many"
    folder.mkdir()
    bible_pdf(tmp_path / "ruth.pdf")
    for copy in range(240):  # a few seconds of converting: the bar shows after half a second
        shutil.copy(tmp_path / "ruth.pdf", folder / f"{copy:03d}.pdf")
    reply, messages = rlm_kernel.execute(f"%rlm context {folder}", timeout=180)
    assert reply["status"] == "ok", reply
    err, out = _stream(messages, "stderr"), _stream(messages, "stdout")
    assert "loading the context" in err and "\r" in err and "file/s" in err  # one line, redrawn in the cell
    assert "Loaded 240 documents" in out and "`context` is a list of 240 documents (240 PDF)" in out
    assert rlm_kernel.value("(type(context).__name__, len(context), context[7].kind, len(context[7].pages) > 1)") \
        == "('Documents', 240, 'pdf', True)"
    reply, messages = rlm_kernel.execute(f"%rlm context {folder}", timeout=180)
    assert "240 from the cache" in _stream(messages, "stdout")


def _stream(messages, name: str) -> str:
    return "".join(m["content"]["text"] for m in messages
                   if m["header"]["msg_type"] == "stream" and m["content"]["name"] == name)


def test_a_sandboxed_run_gets_the_documents_as_loaded(server, make_rlm, tmp_path):
    require_bubblewrap()
    path = tmp_path / "data" / "ruth.pdf"
    path.parent.mkdir()
    pages = bible_pdf(path)
    probe = repl("print(type(context).__name__, context.kind, len(context.pages), context.pages[1].citation, "
                 "__rlm_sandbox__.context_from)")
    srv = server(Script(root=[probe, "FINAL(done)"]))
    result = make_rlm(srv, sandbox=True, sandbox_dir=str(tmp_path / "work")).completion(path, "Look.")
    assert result.reason == "final", result.error
    text = cell_text(cells_by_role(result.notebook, "code")[0])
    assert f"Document pdf {pages} {path}, page 2 value" in text, text  # handed in as loaded, not converted again
