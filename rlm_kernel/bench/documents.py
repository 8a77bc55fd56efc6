"""``rlm-kernel bench documents``: loading a folder of real documents.

The corpus (``documents_corpus.py``, written once into a temp folder and
kept): the King James Bible, one PDF per book, and Paul Graham's essays, one
PDF each (over 1,000 pages in all, by reportlab), plus Word documents, decks,
web pages, an e-book and a workbook of the same texts. Each round, in fresh
processes with the libraries already imported:

* the peer: the chosen converters (pypdfium2, python-docx, python-pptx,
  trafilatura, ebooklib, pandas) called file by file in one process, as a
  person would script them;
* ours: ``load_context`` on the folder (worker processes, documents built,
  conversions written to a fresh cache), then the same load again (from the
  cache), the loading process's peak memory above what it held before.

Printed as ratios: pages per second against the peer (target >= 1.7x on 2
cores), the cached reload as a share of the first load (<= 5%), peak memory
against the corpus's text (<= 3x).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import BenchError, Progress, quiet
from .report import fmt_ratio, machine_info, md_table, median, table, verdict

SPEED_TARGET, RELOAD_TARGET, MEMORY_TARGET = 1.7, 0.05, 3.0
CORPUS_VERSION = 1


def corpus_folder(where: str | None = None, progress: Progress = quiet, books: int | None = None,
                  essays: int | None = None) -> tuple[Path, dict[str, Any]]:
    """The corpus (the whole Bible and all the essays, or the first ``books``
    and ``essays``), written on first use (about half a minute) and kept."""
    part = "" if books is None and essays is None else f"-{books}-{essays}"
    folder = Path(where or tempfile.gettempdir()) / f"rlm-bench-documents-v{CORPUS_VERSION}{part}"
    manifest = folder / "manifest.json"
    if manifest.exists():
        return folder, json.loads(manifest.read_text())
    from . import documents_corpus as corpus

    progress(f"writing the corpus into {folder} (PDFs of the Bible and the essays, Office files, web pages)")
    written = corpus.write_pdfs(folder / "pdf", books, essays)
    others = corpus.write_office(folder / "office", min(6, essays or 6))
    files = [*written.files, *others]
    facts = {"pdf_pages": written.pages, "pdfs": len(written.files), "other_files": len(others),
             "bytes": sum(p.stat().st_size for p in files)}
    manifest.write_text(json.dumps(facts))
    return folder, facts


def _imports() -> None:
    import docx  # noqa: F401 - imported before the clock starts, on both sides
    import ebooklib  # noqa: F401
    import pandas  # noqa: F401
    import pptx  # noqa: F401
    import pypdfium2  # noqa: F401
    import trafilatura  # noqa: F401


def peer_child(config: dict[str, Any]) -> dict[str, Any]:
    """The chosen converters, file by file in this one process."""
    _imports()
    files = sorted(p for p in Path(config["folder"]).rglob("*") if p.is_file() and p.name != "manifest.json")
    started, cpu = time.perf_counter(), _cpu()
    chars = sum(len(_peer_convert(path)) for path in files)
    return {"seconds": time.perf_counter() - started, "cpu_s": _cpu() - cpu, "chars": chars, "files": len(files)}


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _peer_convert(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(str(path))
        texts = []
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_bounded())
            textpage.close()
            page.close()
        pdf.close()
        return "\n".join(texts)
    if suffix == ".docx":
        import docx

        return "\n".join(p.text for p in docx.Document(str(path)).paragraphs)
    if suffix == ".pptx":
        import pptx

        return "\n".join(shape.text_frame.text for slide in pptx.Presentation(str(path)).slides
                         for shape in slide.shapes if shape.has_text_frame)
    if suffix == ".html":
        import trafilatura

        return trafilatura.extract(path.read_text(encoding="utf-8")) or ""
    if suffix == ".epub":
        import trafilatura
        from ebooklib import ITEM_DOCUMENT, epub

        book = epub.read_epub(str(path))
        return "\n".join(trafilatura.extract(item.get_content(), favor_recall=True) or ""
                         for item in book.get_items_of_type(ITEM_DOCUMENT))
    if suffix == ".xlsx":
        import pandas as pd

        return "\n".join(frame.to_csv() for frame in pd.read_excel(path, sheet_name=None).values())
    return path.read_text(encoding="utf-8", errors="replace")


def ours_child(config: dict[str, Any]) -> dict[str, Any]:
    """Ours: a first load into a fresh cache, then the same load again."""
    from ..context.files import load_context
    from .memory import hwm_bytes, reset_peak, rss_bytes

    _imports()
    folder = [str(p) for p in sorted(Path(config["folder"]).iterdir()) if p.name != "manifest.json"]
    cache = tempfile.mkdtemp(prefix="rlm-bench-documents-cache-")
    before = rss_bytes() or 0
    reset_peak()
    started, cpu = time.perf_counter(), _cpu()
    first = load_context(folder, cache=cache)
    first_s, first_cpu = time.perf_counter() - started, _cpu() - cpu
    peak = (hwm_bytes() or 0) - before
    text_bytes = sum(len(e.encode("utf-8")) for e in first.value if isinstance(e, str))
    started = time.perf_counter()
    again = load_context(folder, cache=cache)
    again_s = time.perf_counter() - started
    if again.cached != len(again.value) or first.skipped:
        raise BenchError(f"the reload took {again.cached} of {len(again.value)} from the cache; skipped: "
                         f"{[str(s) for s in first.skipped]}")
    import resource

    workers_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"first_s": first_s, "cpu_s": first_cpu, "reload_s": again_s, "entries": len(first.value), "chars": first.chars,
            "text_bytes": text_bytes, "peak_growth_bytes": peak, "worker_peak_rss_bytes": workers_peak}


def run_documents(*, repeats: int = 3, where: str | None = None, progress: Progress = quiet,
                  books: int | None = None, essays: int | None = None) -> dict[str, Any]:
    from .children import run_child

    folder, facts = corpus_folder(where, progress, books, essays)
    peer: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for turn in range(repeats):  # in turns, so a change in the machine's load falls on both alike
        progress(f"turn {turn + 1} of {repeats}: the peer file by file, then ours (first load, cached reload)")
        peer.append(run_child("rlm_kernel.bench.documents:peer_child", {"folder": str(folder)}))
        ours.append(run_child("rlm_kernel.bench.documents:ours_child", {"folder": str(folder)}))
    pages = facts["pdf_pages"]
    speed = [p["seconds"] / o["first_s"] for p, o in zip(peer, ours, strict=True)]
    reload = [o["reload_s"] / o["first_s"] for o in ours]
    memory = [o["peak_growth_bytes"] / o["text_bytes"] for o in ours]
    summary = {"speed_ratio": median(speed), "speed_ratios": speed, "reload_share": median(reload),
               "memory_ratio": median(memory)}
    summary["targets"] = {"speed": (summary["speed_ratio"] or 0) >= SPEED_TARGET,
                          "reload": (summary["reload_share"] or 1) <= RELOAD_TARGET,
                          "memory": (summary["memory_ratio"] or 99) <= MEMORY_TARGET}
    return {"benchmark": "documents", "machine": machine_info(), "corpus": {**facts, "folder": str(folder)},
            "repeats": repeats, "cpus": os.cpu_count(), "pages": pages,
            "peer": {"seconds": median([p["seconds"] for p in peer]), "cpu_s": median([p["cpu_s"] for p in peer])},
            "ours": {k: median([o[k] for o in ours]) for k in ("first_s", "cpu_s", "reload_s", "peak_growth_bytes",
                                                              "text_bytes", "worker_peak_rss_bytes")},
            "summary": summary}


def _rows(results: dict[str, Any]) -> list[list[str]]:
    peer, ours, summary, pages = results["peer"], results["ours"], results["summary"], results["pages"]
    targets = summary["targets"]
    return [
        ["pages per second (whole corpus)", f"{pages / peer['seconds']:,.0f}", f"{pages / ours['first_s']:,.0f}",
         fmt_ratio(summary["speed_ratio"]), f">= {SPEED_TARGET}x: {verdict(targets['speed'])}"],
        ["first load", f"{peer['seconds']:.2f} s", f"{ours['first_s']:.2f} s", "", ""],
        ["CPU time of the first load (all processes)", f"{peer['cpu_s']:.2f} s", f"{ours['cpu_s']:.2f} s",
         fmt_ratio(ours["cpu_s"] / peer["cpu_s"] if peer["cpu_s"] else None), "our overhead"],
        ["cached reload, share of the first load", "", f"{ours['reload_s'] * 1000:.0f} ms",
         f"{summary['reload_share'] * 100:.1f}%", f"<= {RELOAD_TARGET:.0%}: {verdict(targets['reload'])}"],
        ["peak memory of the load / its text", "", f"{ours['peak_growth_bytes'] / 2**20:.0f} MiB / "
         f"{ours['text_bytes'] / 2**20:.1f} MiB", fmt_ratio(summary["memory_ratio"]),
         f"<= {MEMORY_TARGET:g}x: {verdict(targets['memory'])}"],
        ["a worker's peak resident memory", "", f"{ours['worker_peak_rss_bytes'] / 2**20:.0f} MiB", "", ""],
    ]


HEADER = ["", "peer (file by file)", "ours", "ratio", "target"]


def _corpus_line(results: dict[str, Any]) -> str:
    corpus = results["corpus"]
    return (f"{corpus['pdfs']} PDFs of {results['pages']:,} pages (the King James Bible by book, Paul Graham's "
            f"essays) and {corpus['other_files']} Word, PowerPoint, HTML, EPUB and Excel files, "
            f"{corpus['bytes'] / 2**20:.1f} MiB; {results['cpus']} CPUs; median of {results['repeats']} turns")


def format_text(results: dict[str, Any]) -> str:
    return f"Loading documents ({_corpus_line(results)})\n" + table(_rows(results), HEADER)


def format_markdown(results: dict[str, Any]) -> str:
    return ("## Loading documents\n\n`rlm-kernel bench documents`: a folder of real documents loaded by "
            "`load_context` (worker processes, a fresh content-hash cache, then the same load from it) against "
            "the chosen converters called file by file in one process; each side in a fresh process with the "
            f"libraries imported before the clock starts. {_corpus_line(results)}. The speed ratio needs the "
            "machine's CPUs free (see the load average below); the CPU row is our overhead whatever the load.\n\n"
            + md_table(_rows(results), HEADER))


__all__ = ["corpus_folder", "format_markdown", "format_text", "ours_child", "peer_child", "run_documents"]
