"""Sandboxed runs (``RLM(sandbox=True)``, ``rlm-kernel run --sandbox``):
generated code runs in a confined execution kernel (bubblewrap), the engine
outside. The scripted root model writes escape attempts; each is refused and
the run goes on. The same script run unconfined shows each attempt would
succeed there, so every assertion here depends on the sandbox."""

from __future__ import annotations

import socket
import subprocess

import pytest
from _helpers import Router, cell_text, cells_by_role, repl, require_bubblewrap

from rlm_kernel.errors import RLMError
from rlm_kernel.sandbox import launcher


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    require_bubblewrap()

SECRET = "sk-sandbox-test-9f8e7d6c5b4a"


def _code_cells(result):
    return cells_by_role(result.notebook, "code")


def _error(cell):
    errors = [o for o in cell.outputs if o.output_type == "error"]
    return errors[0].ename if errors else None


def test_sub_calls_work_from_inside_and_the_code_runs_elsewhere(server, make_rlm, tmp_path):
    router = Router({
        "root-model": [
            repl("import os\nr = llm_query('what is two plus two?')\nprint('sub said:', r, '| pid', os.getpid())"),
            repl("c = rlm_query('a child task', model='openai/child-model')\nprint('child said:', c)"),
            repl("both = llm_query_batched(['a', 'b'])\nFINAL_VAR('both')"),
        ],
        "child-model": [repl("import os\nFINAL('child ran in pid ' + str(os.getpid()) + ' on ' + context)")],
    }, sub=lambda prompt: f"answer to <{prompt}>")
    srv = server(router)
    result = make_rlm(srv, sandbox=True, sandbox_dir=str(tmp_path)).completion("top context", "Ask around.")
    assert result.reason == "final", result.error
    assert result.answer == ["answer to <a>", "answer to <b>"]
    first, second, _ = _code_cells(result)
    assert "sub said: answer to <what is two plus two?> | pid 2" in cell_text(first)  # pid 2: its own pid namespace
    assert "child said: child ran in pid 2 on a child task" in cell_text(second)
    call = first.metadata.rlm.subcalls[0]
    assert "kind" not in call and call["status"] == "done" and call["response"].startswith("answer to")
    assert second.metadata.rlm.subcalls[0]["child"]["reason"] == "final"
    # the sub-calls were made outside, with the run's own endpoint
    assert [b["model"] for b in srv.requests].count("sub-model") == 3


ESCAPES = [
    ("socket", "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3).close()\nprint('connected')"),
    ("dns", "import socket\nprint(socket.getaddrinfo('pypi.org', 443)[0][4])"),
    ("write", "open({outside!r}, 'w').write('escaped')\nprint('written')"),
    ("env", "import os\nprint(os.environ['RLM_TEST_SECRET'])"),
    ("home", "print(open({home_file!r}).read())"),
    ("spawn", "import subprocess\np = subprocess.Popen(['sleep', '317'])\nleft = p.pid\nprint('started')"),
    ("outlives", "import os\nos.kill(left, 0)\nprint('still there')"),
    ("memory", "big = bytearray(1600 * 1024 * 1024)\nprint('allocated', len(big))"),
    ("inside", "open('made-inside.txt', 'w').write('ok')\nprint('wrote my folder')"),
]
REFUSED = {"socket": "ConnectionRefusedError", "dns": "gaierror", "write": ("FileNotFoundError", "OSError"),
           "env": "KeyError", "home": "FileNotFoundError", "spawn": None, "outlives": "ProcessLookupError",
           "memory": "MemoryError", "inside": None}


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unconfined"])
def test_escape_attempts_are_refused_and_the_run_goes_on(sandbox, server, make_rlm, tmp_path, monkeypatch):
    folder, elsewhere, home = tmp_path / "notebook", tmp_path / "elsewhere", tmp_path / "home"
    for path in (folder, elsewhere, home):
        path.mkdir()
    (home / ".secret").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RLM_TEST_SECRET", SECRET)
    monkeypatch.chdir(folder)
    try:
        socket.getaddrinfo("pypi.org", 443)
        resolves = True
    except OSError:
        resolves = False
    srv = server(Router({}))  # the code tries to reach this very server
    port = int(srv.url.rsplit(":", 1)[1].split("/")[0])
    fields = {"port": port, "outside": str(elsewhere / "escaped.txt"), "home_file": str(home / ".secret")}
    srv.responder = Router({"root-model": [repl(code.format(**fields)) for _, code in ESCAPES] + ["FINAL(survived)"]})
    rlm = make_rlm(srv, sandbox=sandbox, sandbox_dir=str(folder), sandbox_memory=1024, max_iterations=20)
    try:
        result = rlm.completion("ctx", "Try everything.")
        assert result.reason == "final" and result.answer == "survived"
        cells = {name: cell for (name, _), cell in zip(ESCAPES, _code_cells(result), strict=True)}
        errors = {name: _error(cell) for name, cell in cells.items()}
        if sandbox:
            for name, expected in REFUSED.items():
                allowed = expected if isinstance(expected, tuple) else (expected,)
                assert errors[name] in allowed, (name, errors[name], cell_text(cells[name]))
            assert not (elsewhere / "escaped.txt").exists()
            assert (folder / "made-inside.txt").read_text() == "ok"
            assert SECRET not in str(result.notebook)
            assert "sleep 317" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        else:  # the same code, unconfined, gets through: the refusals above are the sandbox's doing
            expected_ok = {"socket", "write", "env", "home", "spawn", "outlives", "memory", "inside"}
            if resolves:
                expected_ok.add("dns")
            assert {n for n in expected_ok if errors[n] is not None} == set(), errors
            assert (elsewhere / "escaped.txt").read_text() == "escaped"
    finally:
        subprocess.run(["pkill", "-x", "-f", "sleep 317"], check=False)


def test_a_cell_past_its_cpu_seconds_is_stopped_and_the_run_goes_on(run_rlm, tmp_path):
    result, _ = run_rlm(root=[repl("while True:\n    pass"), repl("print('next cell ran')"), "FINAL(done)"],
                        sandbox=True, sandbox_dir=str(tmp_path), sandbox_cpu=1.0, cell_timeout=30)
    spin, after = _code_cells(result)
    assert _error(spin) == "CPULimitExceeded"
    assert "--sandbox-cpu" in cell_text(spin)
    assert cell_text(after).strip() == "next cell ran"
    assert result.answer == "done"


def test_code_cannot_lift_its_cpu_limit_and_a_cell_that_ignores_it_is_killed_and_the_run_goes_on(run_rlm, tmp_path):
    lift = ("import resource, signal\n"
            "try:\n"
            "    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
            "    print('lifted')\n"
            "except (ValueError, OSError) as error:\n"
            "    print('refused:', error)\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n"
            "print('hard limit set', hard != resource.RLIM_INFINITY)")
    spin = ("import resource, signal\n"
            "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
            "hard = resource.getrlimit(resource.RLIMIT_CPU)[1]\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))  # the soft limit as far as it goes\n"
            "while True:\n    pass")
    result, _ = run_rlm(root=[repl(lift), repl(spin), repl("x = 1\nprint('a new kernel ran this')"), "FINAL(done)"],
                        sandbox=True, sandbox_dir=str(tmp_path), sandbox_cpu=1.0, cell_timeout=60)
    first, killed, after = _code_cells(result)
    assert "refused:" in cell_text(first) and "hard limit set True" in cell_text(first), cell_text(first)
    assert _error(killed) == "SandboxKernelDied" and "next cell starts a new one" in cell_text(killed)
    assert cell_text(after).strip() == "a new kernel ran this"
    assert result.answer == "done"


def test_a_missing_bubblewrap_is_one_sentence_and_never_a_fallback(run_rlm, tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "BWRAP", "bwrap-not-installed")
    with pytest.raises(RLMError) as caught:
        run_rlm(root=[repl("print('ran unconfined')")], sandbox=True, sandbox_dir=str(tmp_path))
    assert str(caught.value) == launcher.INSTALL
    assert "apt-get install bubblewrap" in str(caught.value)


def test_a_sandboxed_run_resumes_with_its_sub_calls_replayed_and_a_pinned_response(server, make_rlm, tmp_path):
    import nbformat

    first_srv = server(Router({"root-model": [
        repl("notes = llm_query('read part one')\nprint('notes:', notes)"), "FINAL_VAR(notes)"]},
        sub=lambda prompt: f"model said <{prompt}>"))
    path = tmp_path / "run.ipynb"
    (tmp_path / "doc.txt").write_text("the document")
    first = make_rlm(first_srv, sandbox=True, sandbox_dir=str(tmp_path)).completion(
        "the document", "q", output=path, sources=[str(tmp_path / "doc.txt")])
    assert first.answer == "model said <read part one>"
    # a person pins an edited response to the sub-call, in the file
    nb = nbformat.read(str(path), as_version=4)
    code = cells_by_role(nb, "code")[0]
    code.metadata.rlm.subcalls[0]["response"] = "PINNED by a person"
    code.metadata.rlm.subcalls[0]["pinned"] = True
    nbformat.write(nb, str(path))
    srv = server(Router({"root-model": [repl("print('again:', notes)"), "FINAL_VAR(notes)"]},
                        sub=lambda prompt: "a new sub-call was made"))
    result = make_rlm(srv, sandbox=True, sandbox_dir=str(tmp_path)).resume(path, output=tmp_path / "resumed.ipynb")
    assert result.reason == "final", result.error
    assert result.answer == "PINNED by a person"  # the re-run cell's sub-call answered from the notebook, inside
    assert srv.calls("sub-model") == []
    assert "again: PINNED by a person" in cell_text(_code_cells(result)[-1])


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unconfined"])
def test_the_entries_behave_as_unconfined(sandbox, run_rlm, tmp_path):
    """FINAL in a cell that then raises, a helper the code rebinds (restored,
    and the model told), the answer dict: the same in both."""
    result, srv = run_rlm(root=[
        repl("llm_query = None\nanswer['content'] = 'partial'"),
        repl("print(llm_query('still here'))\nFINAL('given before the error')\n1 / 0"),
    ], sub=lambda prompt: f"sub <{prompt}>", sandbox=sandbox, sandbox_dir=str(tmp_path))
    assert (result.reason, result.answer) == ("final", "given before the error")
    told = "\n".join(str(m.get("content")) for m in srv.calls("root-model")[1]["messages"])
    assert "rebound or deleted `llm_query`" in told
    assert "sub <still here>" in cell_text(_code_cells(result)[1])


IMAGES_AND_JOBS = """
import matplotlib.pyplot as plt
from PIL import Image as _P
fig, ax = plt.subplots(figsize=(2, 2))
ax.bar(["a", "b"], [1, 3])
_P.new("RGB", (40, 20), "red").save("red.png")
one = llm_query("describe", images=[fig, _P.new("RGB", (30, 30), "blue"), "red.png"])
pair = llm_query_batched([("chart", [fig]), "plain"])
job = llm_query_batched([f"slow {i}" for i in range(3)], wait=False)
display(fig)
print(one, "|", pair, "|", type(job).__name__)
"""


def test_images_and_background_jobs_work_from_inside(tmp_path):
    # Inside the sandbox a figure, a PIL image and a path mean nothing outside: they cross as data URLs; a
    # background job stays outside and its handle inside asks it for its state.
    from rlm_kernel import RLM
    from rlm_kernel.testing.server import Script, ScriptedServer

    pytest.importorskip("PIL.Image")
    root = [repl(IMAGES_AND_JOBS), repl("print(job.progress[1], job.done() in (True, False))\nFINAL_VAR(job.result())")]
    with ScriptedServer(Script(root=root, sub=lambda p: f"saw {p}"), max_images=5) as srv:
        result = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=srv.url, vision="on",
                     sandbox=True, sandbox_dir=str(tmp_path)).completion("ctx", "Look.")
        sub_images = [i for i in srv.images if i.model == "sub-model"]
        root_images = [i for i in srv.images if i.model == "root-model"]
    assert result.reason == "final", result.error
    assert result.answer == ["saw slow 0", "saw slow 1", "saw slow 2"]
    first, second = _code_cells(result)
    assert "saw describe | ['saw chart', 'saw plain'] | RemoteJob" in cell_text(first), cell_text(first)
    assert "3 True" in cell_text(second)
    assert len(sub_images) == 3 + 1 and {(i.width, i.height) for i in sub_images} >= {(30, 30), (40, 20)}
    # display(fig), and the inline backend showing the figure left open at the cell's end, as in any kernel
    assert len(root_images) == 2, "the figure the confined cell displayed did not reach the root model"
    assert len(first.metadata.rlm.images) == 3  # fig, the blue square, red.png: each stored once for the cell
