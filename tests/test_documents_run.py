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


def test_a_follow_up_loads_the_recorded_documents_again(server, tmp_path):
    from _cli import run_cli

    pdf, pages = tmp_path / "ruth.pdf", 0
    pages = bible_pdf(pdf)
    env = clean_env(OPENAI_API_KEY="x", RLM_CACHE_DIR=str(tmp_path / "cache"))
    srv = server(Router({"root-model": ["FINAL(first)", "FINAL(second)"]}))
    common = ["--model", "openai/root-model", "--api-base", srv.url, "--json"]
    done = run_cli(["run", "--context", str(pdf), "--query", "What is it?", "-o", str(tmp_path / "one.ipynb"),
                    *common], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    done = run_cli(["run", "--resume", str(tmp_path / "one.ipynb"), "--query", "And then?", "-o",
                    str(tmp_path / "two.ipynb"), *common], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    told = [call["messages"][1]["content"] for call in srv.calls("root-model")]
    assert len(told) == 2 and all(t.startswith(f"`context` is one document: {pdf} (pdf, {pages} pages,") for t in told)


def test_interrupting_rlm_context_stops_the_load_and_keeps_the_context(rlm_kernel, tmp_path):
    folder = rlm_kernel.cwd / "very-many"
    folder.mkdir()
    bible_pdf(tmp_path / "esther.pdf", "Esther")
    for copy in range(600):
        shutil.copy(tmp_path / "esther.pdf", folder / f"{copy:03d}.pdf")
    rlm_kernel.execute("context = 'as it was'")
    msg_id = rlm_kernel.kc.execute(f"%rlm context {folder} --encoding utf-8")
    seen: list[dict] = []
    while "file/s" not in _stream(seen, "stderr"):  # the load is under way: its progress line shows
        # (its two workers are the children of the fork server the kernel started, a thread-safe start)
        seen.append(rlm_kernel.kc.get_iopub_msg(timeout=120))
    server = rlm_kernel.km.provisioner.process.pid
    assert len([p for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) in _children(server)]) >= 1
    took = rlm_kernel.interrupt(msg_id, within=20)
    reply = rlm_kernel._reply(msg_id, 10)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
    assert "`context` is unchanged" in reply["evalue"] and took < 10
    assert rlm_kernel.value("context") == "'as it was'"
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) in _children(server)]
    assert left == [], f"worker processes outlived the interrupted load: {left}"


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _children(pid: int) -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == pid}


def test_a_loaded_image_reaches_a_sub_call_and_the_root_models_eyes(server, make_rlm, tmp_path):
    from _documents import png

    folder = tmp_path / "in"
    folder.mkdir()
    png(folder / "chart.png", (120, 60), "blue")
    (folder / "notes.txt").write_text("The chart is blue.")
    root = [repl("display(context[0])\nseen = llm_query('What colour is this image?', images=[context[0]])\n"
                 "print(seen)"), "FINAL_VAR(seen)"]
    srv = server(Script(root=root, sub=lambda prompt: "blue"))
    result = make_rlm(srv, vision="on").completion(folder, "What colour is the chart?")
    assert result.reason == "final" and result.answer_text == "blue", result.error
    received = [(image.model, image.mime, image.width, image.height) for image in srv.images]
    assert ("sub-model", "image/png", 120, 60) in received  # llm_query(images=[context[0]])
    assert ("root-model", "image/png", 120, 60) in received  # the cell displayed it: the root model sees it
