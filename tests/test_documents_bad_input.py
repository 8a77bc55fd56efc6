"""Bad inputs among good ones: each is skipped with one sentence saying what
happened and what to do, the rest loads, a summary line says both, and the
root model is told the same. Alone, a bad input is the load's one error.
Without the documents extra, a PDF is refused naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_cli
from _documents import (
    GENESIS_1_1,
    bible_pdf,
    encrypted_pdf,
    essay,
    scanned_pdf,
    truncated,
    zip_bomb,
)
from _helpers import ROOT, clean_env

from rlm_kernel.bench import documents_corpus as corpus
from rlm_kernel.context.files import available_memory, load_context
from rlm_kernel.errors import ContextError
from rlm_kernel.testing.server import Script, ScriptedServer

REPO = Path(__file__).resolve().parent.parent
SENTENCES = {  # file -> words its sentence must have
    "encrypted.pdf": ("encrypted", "password", "decrypt"),
    "scan.pdf": ("no text layer", "OCR"),
    "cut.pdf": ("not a readable PDF", "truncated"),
    "cut.docx": ("not a readable Word document", "truncated"),
    "blob.bin": ("binary",),
    "bomb.zip": ("zip bomb", "GiB"),
    "huge.pdf": ("GB", "memory"),
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RLM_ARCHIVE_MAX_BYTES", str(8 * 2**20))  # the bomb expands to 64 MiB


def bad_folder(folder: Path) -> Path:
    folder.mkdir()
    bible_pdf(folder / "good.pdf", "Ruth")
    (folder / "good.txt").write_text(GENESIS_1_1, encoding="utf-8")
    encrypted_pdf(folder / "encrypted.pdf")
    scanned_pdf(folder / "scan.pdf")
    truncated(folder / "good.pdf", folder / "cut.pdf")
    name, paragraphs = essay(0)
    corpus.write_docx(folder / "whole.docx", name, paragraphs)
    truncated(folder / "whole.docx", folder / "cut.docx", 0.5)
    (folder / "whole.docx").unlink()
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 64)
    zip_bomb(folder / "bomb.zip", megabytes=64)
    with open(folder / "huge.pdf", "wb") as handle:  # sparse: no disk, twice the free memory
        handle.truncate(2 * (available_memory() or 24 * 10**9) + 10**9)
    return folder


def test_each_bad_input_is_one_sentence_and_the_rest_loads(tmp_path):
    folder = bad_folder(tmp_path / "in")
    loaded = load_context([str(folder)])
    assert [Path(e.source).name for e in loaded.value] == ["good.pdf", "good.txt"]
    said = {Path(s.source).name: str(s) for s in loaded.skipped}
    assert sorted(said) == sorted(SENTENCES)
    for name, words in SENTENCES.items():
        sentence = said[name]
        assert all(w in sentence for w in words), (name, sentence)
        assert "\n" not in sentence and sentence.count(". ") <= 2 and "Traceback" not in sentence, sentence
        assert name in sentence
    assert loaded.value.skipped == loaded.skipped  # travels with the value: the root model is told
    summary = loaded.summary
    assert summary.startswith("Loaded 2 documents") and "skipped 7" in summary and "\n" not in summary


@pytest.mark.parametrize("name", sorted(SENTENCES))
def test_a_bad_input_alone_is_the_loads_one_error(tmp_path, name):
    folder = bad_folder(tmp_path / "in")
    with pytest.raises(ContextError) as info:
        load_context([str(folder / name)])
    text = str(info.value)
    assert all(w in text for w in SENTENCES[name]) and "\n" not in text, text


def test_the_root_model_is_told_what_was_skipped(tmp_path):
    folder = bad_folder(tmp_path / "in")
    with ScriptedServer(Script(root=["FINAL(seen)"])) as server:
        done = run_cli(["run", "--context", str(folder), "--query", "What is here?", "--model", ROOT, "--api-base",
                        server.url, "--json", "-o", str(tmp_path / "run.ipynb")], tmp_path,
                       env=clean_env(OPENAI_API_KEY="x", RLM_CACHE_DIR=str(tmp_path / "cache"),
                                     RLM_ARCHIVE_MAX_BYTES=str(8 * 2**20)))
        first = server.calls("root-model")[0]["messages"][1]["content"]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "seen"
    assert "rlm-kernel: Loaded 2 documents" in done.stderr and "skipped 7" in done.stderr
    assert "Skipped 7 inputs" in first
    for name, words in SENTENCES.items():
        assert name in first and words[0] in first, name


def _without_the_extra(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in this machine's Python without our venv's packages (so
    without the documents extra); the loader needs only the standard library."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    env = clean_env(PYTHONPATH=str(REPO), RLM_CACHE_DIR=str(tmp_path / "cache"), PYTHONNOUSERSITE="1")
    return subprocess.run([str(base), "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


def test_without_the_extra_a_pdf_is_refused_naming_it(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    bible_pdf(folder / "ruth.pdf")
    (folder / "notes.txt").write_text(GENESIS_1_1)
    probe = _without_the_extra("import importlib.util as u; print(u.find_spec('pypdfium2') is None)", tmp_path)
    assert probe.stdout.strip() == "True", probe.stderr  # a Python that really lacks it
    code = f"""
from rlm_kernel.context.files import load_context
from rlm_kernel.errors import ContextError
try:
    load_context([{str(folder / 'ruth.pdf')!r}])
except ContextError as error:
    print("ALONE:", error)
loaded = load_context([{str(folder)!r}])
print("LOADED:", [str(e) for e in loaded.value])
print("SKIPPED:", [str(s) for s in loaded.skipped])
"""
    done = _without_the_extra(code, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert "pip install 'rlm-kernel[documents]'" in lines["ALONE"] and "ruth.pdf" in lines["ALONE"]
    assert lines["ALONE"].count(". ") == 0
    assert lines["LOADED"] == repr([GENESIS_1_1])
    assert "rlm-kernel[documents]" in lines["SKIPPED"]


def test_a_sandbox_without_network_says_so_for_a_url(tmp_path):
    """Where nothing can be reached (a sandbox has no network), a URL is one sentence too."""
    with pytest.raises(ContextError) as info:
        load_context(["http://127.0.0.1:9/nothing-listens-here"], url_timeout=5)
    assert "Cannot reach http://127.0.0.1:9/nothing-listens-here" in str(info.value)
    assert os.linesep not in str(info.value)
