"""How a big folder loads: in worker processes (the same entries as
converting here), with progress as each file is done, from the cache by
content hash the second time (a changed file converted again, a copy found
under its new name), and stopped cleanly by an interrupt: the workers end
with the load, and the terminal's progress line was redrawn in place."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _documents import bible_pdf
from _helpers import clean_env

from rlm_kernel.context.files import load_context

BOOKS = ("Ruth", "Jonah", "Joel", "Micah", "Nahum", "Habakkuk")


@pytest.fixture(scope="module")
def books(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("books")
    for book in BOOKS:
        bible_pdf(folder / f"{book}.pdf", book)
    return folder


def _entries(value):
    return [(d.source, str(d), [p.number for p in d.pages]) for d in value]


def test_workers_give_what_converting_here_gives_with_progress(books, tmp_path):
    seen = []

    def progress(done, total, source):
        seen.append((done, total, Path(source).name, len(multiprocessing.active_children())))

    pooled = load_context([str(books)], workers=2, cache=False, progress=progress)
    here = load_context([str(books)], workers=0, cache=False)
    assert _entries(pooled.value) == _entries(here.value)
    assert [d for d, *_ in seen] == list(range(1, len(BOOKS) + 1)) and {t for _, t, *_ in seen} == {len(BOOKS)}
    assert sorted(name for _, _, name, _ in seen) == sorted(f"{b}.pdf" for b in BOOKS)
    assert max(workers for *_, workers in seen) == 2  # converted in two worker processes
    assert multiprocessing.active_children() == []  # and they are gone after the load


def test_the_cache_serves_a_second_load_and_converts_a_changed_file(books, tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(books, folder)
    cache = str(tmp_path / "cache")
    first = load_context([str(folder)], cache=cache)
    assert first.cached == 0
    again = load_context([str(folder)], cache=cache)
    assert again.cached == len(BOOKS) and _entries(again.value) == _entries(first.value)
    assert "from the cache" in again.summary
    bible_pdf(folder / "Ruth.pdf", "Obadiah")  # the same name, other content
    shutil.copy(folder / "Jonah.pdf", folder / "Jonah-copy.pdf")  # the same content, another name
    third = load_context([str(folder)], cache=cache)
    by_name = {Path(d.source).name: d for d in third.value}
    assert third.cached == len(BOOKS)  # five unchanged and the copy; Ruth.pdf converted again
    assert "Obadiah" in by_name["Ruth.pdf"] and "Naomi" not in by_name["Ruth.pdf"]
    assert by_name["Jonah-copy.pdf"].source == str(folder / "Jonah-copy.pdf")
    assert str(by_name["Jonah-copy.pdf"]) == str(by_name["Jonah.pdf"])


def test_an_interrupt_stops_a_long_load_and_its_workers(books, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for copy in range(40):  # ~40 x 6 books, several seconds of converting
        for book in BOOKS:
            shutil.copy(books / f"{book}.pdf", folder / f"{copy:02d}-{book}.pdf")
    code = f"""
import multiprocessing, sys
from rlm_kernel.context import files
def progress(done, total, source):
    if done == 3:
        print("WORKERS", *[p.pid for p in multiprocessing.active_children()], flush=True)
    bar(done, total, source)
from rlm_kernel.context.progress import ProgressBar
bar = ProgressBar(delay=0)
try:
    files.load_context([{str(folder)!r}], workers=2, cache=False, progress=progress)
except KeyboardInterrupt:
    bar.close()
    print("INTERRUPTED", flush=True)
    sys.exit(130)
print("FINISHED", flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=clean_env())  # bytes: a text pipe would turn the bar's carriage returns into newlines
    first = child.stdout.readline().decode()
    assert first.startswith("WORKERS "), (first, child.stderr.read() if child.poll() is not None else "")
    workers = [int(pid) for pid in first.split()[1:]]
    assert len(workers) == 2
    time.sleep(0.5)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = (part.decode() for part in child.communicate(timeout=30))
    stopped = time.monotonic() - sent
    assert child.returncode == 130 and "INTERRUPTED" in out, (out, err)
    assert stopped < 5, stopped
    for pid in workers:
        assert not _alive(pid), f"worker {pid} outlived the interrupted load"
    assert "loading the context" in err and "\r" in err and "Traceback" not in err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return "State:\tZ" not in handle.read()
    except FileNotFoundError:
        return False


def test_the_public_loader_prints_a_summary(books, tmp_path):
    code = ("import rlm_kernel\nvalue = rlm_kernel.load_context(" + repr(str(books)) + ")\n"
            "print(type(value).__name__, len(value), value.inputs[0].rsplit('/', 1)[-1])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=clean_env(RLM_CACHE_DIR=str(tmp_path / "cache")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Documents", str(len(BOOKS)), "Habakkuk.pdf"]
    assert f"Loaded {len(BOOKS)} documents (" in done.stderr
    assert os.path.isdir(tmp_path / "cache")  # $RLM_CACHE_DIR is where conversions are kept


def test_an_archives_members_are_cached_by_content_and_their_scratch_paths_forgotten(books, tmp_path):
    import json
    import zipfile

    with zipfile.ZipFile(tmp_path / "books.zip", "w") as archive:
        for book in BOOKS[:3]:
            archive.write(books / f"{book}.pdf", f"bible/{book}.pdf")
    cache = tmp_path / "cache"
    first = load_context([str(tmp_path / "books.zip")], cache=str(cache))
    again = load_context([str(tmp_path / "books.zip")], cache=str(cache))
    assert (first.cached, again.cached) == (0, 3)
    assert [d.source for d in again.value] == [f"{tmp_path}/books.zip/bible/{b}.pdf" for b in sorted(BOOKS[:3])]
    index = cache / "hashes.json"
    remembered = json.loads(index.read_text()) if index.exists() else {}
    assert [path for path in remembered if "rlm-context-" in path] == []  # scratch paths, gone after each load
