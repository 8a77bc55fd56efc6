"""``http(s)://`` inputs, from a real web server on 127.0.0.1: a page
reduced to its main text with its title and URL, a PDF served as one; a
missing page and one that never answers are one sentence each while the
rest loads, and nothing waits past the time limit."""

from __future__ import annotations

import time

import pytest
from _documents import Site, bible_pdf, essay

from rlm_kernel.bench import documents_corpus as corpus
from rlm_kernel.context.document import Document
from rlm_kernel.context.files import load_context
from rlm_kernel.errors import ContextError


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def site(tmp_path):
    name, paragraphs = essay(4)
    pages = bible_pdf(tmp_path / "ruth.pdf")
    served = {"/essays/before.html": (corpus.page_html(name, paragraphs).encode(), "text/html; charset=utf-8"),
              "/files/ruth": ((tmp_path / "ruth.pdf").read_bytes(), "application/pdf"),
              "/notes.txt": (b"plain words", "text/plain")}
    with Site(served) as running:
        running.essay = (name, paragraphs)  # type: ignore[attr-defined]
        running.pdf_pages = pages  # type: ignore[attr-defined]
        yield running


def test_a_web_page_and_a_pdf_by_url(site):
    page_url, pdf_url = f"{site.url}/essays/before.html", f"{site.url}/files/ruth"
    page, pdf, notes = load_context([page_url, pdf_url, f"{site.url}/notes.txt"]).value
    name, paragraphs = site.essay
    assert isinstance(page, Document) and page.kind == "html" and page.source == page_url
    assert page.metadata["url"] == page_url and page.metadata["title"] == name
    assert paragraphs[1][:80] in page and "Subscribe to the newsletter" not in page
    assert pdf.kind == "pdf" and pdf.source == pdf_url and len(pdf.pages) == site.pdf_pages  # by its content type
    assert notes == "plain words" and notes.kind == "text"


def test_a_failing_and_a_slow_url_are_skipped_and_the_rest_loads(site):
    started = time.monotonic()
    loaded = load_context([f"{site.url}/essays/before.html", f"{site.url}/missing", f"{site.url}/slow"],
                          url_timeout=1.5)
    took = time.monotonic() - started
    assert [d.source for d in loaded.value] == [f"{site.url}/essays/before.html"]
    said = {s.source.rsplit("/", 1)[-1]: str(s) for s in loaded.skipped}
    assert "answered HTTP 404" in said["missing"] and "check the address" in said["missing"]
    assert "did not answer within 1.5 s" in said["slow"]
    assert all("\n" not in s for s in said.values())
    assert took < 10, took  # the slow page was given up on, not waited for (it answers after 30 s)
    assert "skipped 2" in loaded.summary


def test_a_url_alone_that_fails_is_the_loads_error(site):
    with pytest.raises(ContextError) as info:
        load_context([f"{site.url}/missing"])
    assert str(info.value) == f"{site.url}/missing answered HTTP 404 Not Found; check the address."
