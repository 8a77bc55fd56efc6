"""Examples run from wherever a person copies them and open unmodified: no
path into this checkout, and the language_info JupyterLab writes."""

from __future__ import annotations

import queue
import shutil

import nbformat
import pytest
from _examples import EXAMPLES, execute, quickstart_responder
from jupyter_client.manager import start_new_kernel

from rlm_kernel.testing.server import ScriptedServer

NOTEBOOKS = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_language_info() -> dict:
    km, kc = start_new_kernel(kernel_name="rlm")
    try:
        kc.kernel_info()
        while True:
            try:
                reply = kc.get_shell_msg(timeout=30)
            except queue.Empty:
                pytest.fail("the rlm kernel did not answer kernel_info")
            if reply["msg_type"] == "kernel_info_reply":
                return reply["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_an_example_opens_unmodified(name: str, kernel_language_info: dict) -> None:
    """JupyterLab writes the kernel's language_info into a notebook when the
    kernel connects; a notebook saved with less is marked modified at once."""
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    assert nb.metadata.get("language_info") == kernel_language_info
    assert nb.metadata["kernelspec"]["name"] == "rlm"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_an_example_names_nothing_in_this_checkout(name: str) -> None:
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    for path in ("../rlm_kernel", "../tests", "../examples", "../docs"):
        assert path not in text, (name, path)


def test_the_quickstart_runs_from_a_copy_elsewhere(tmp_path) -> None:
    folder = tmp_path / "my-notebooks"
    folder.mkdir()
    shutil.copy(EXAMPLES / "quickstart.ipynb", folder / "quickstart.ipynb")
    nb = nbformat.read(folder / "quickstart.ipynb", as_version=4)
    with ScriptedServer(quickstart_responder()) as server:
        execute(nb, folder / "run.ipynb", server.url, cwd=folder)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, errors
    loaded = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.output_type == "stream")
    assert "It was loaded from:" in loaded and "/rlm_kernel/engine/" in loaded
    assert "rlm_result.reason" in nb.cells[-1].source
    assert "final" in "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
