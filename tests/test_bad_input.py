"""Bad input, as a matrix: every case through ``rlm-kernel run`` (a
subprocess: non-zero exit, one sentence on stderr, no traceback) and through
a real RLM kernel (jupyter_client: a short UsageError, no traceback).

Cases: context paths that do not exist, folders with nothing readable,
binary files, text that is not UTF-8, empty files, a context larger than free
memory (refused before reading), unknown model names, a missing or rejected
API key (the variable is named, the key never shown), an unreachable
``--api-base``, invalid option values and an empty question.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_args, run_cli, start_cli
from _helpers import clean_env, free_port
from _kernel import Kernel

from rlm_kernel.context.files import available_memory
from rlm_kernel.testing.server import Reply, Script, ScriptedServer

FAKE_KEY = "sk-FAKE-badinput-0123456789abcdef"
# NaN passes every "at least" check; infinity is no amount of time or money.
NOT_FINITE = [("--max-cost", "nan"), ("--timeout", "nan"), ("--cell-timeout", "nan"), ("--max-cost", "inf"),
              ("--timeout", "inf"), ("--cell-timeout", "inf"), ("--timeout", "1e999")]


@dataclass
class Case:
    """One bad input: the ``rlm-kernel run`` arguments that carry it, the
    kernel cell that carries it, and words its sentence must contain."""

    cli: list[str]
    cell: str
    needles: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 2


def build_cases(base: Path, url: str, rejecting_url: str) -> dict[str, Case]:
    files = base / "files"
    files.mkdir()
    (files / "ok.txt").write_text("some text", encoding="utf-8")
    (files / "binary.dat").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10)
    (files / "latin.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
    (files / "empty.txt").write_bytes(b"")
    (files / "empty_dir").mkdir()
    binaries = files / "binaries"
    binaries.mkdir()
    for i in range(3):
        (binaries / f"blob{i}.bin").write_bytes(bytes(range(256)) * 4)
    hidden = files / "only_hidden"
    hidden.mkdir()
    (hidden / ".secret").write_text("hidden")
    huge = files / "huge.txt"
    with open(huge, "wb") as handle:  # sparse: takes no disk, would take twice the free memory
        handle.truncate(2 * (available_memory() or 24 * 10**9) + 10**9)
    ok = str(files / "ok.txt")

    def ctx(path: Path | str, *extra: str) -> tuple[list[str], str]:
        """A context case: CLI args with a working model, and the kernel line."""
        cli = ["--context", str(path), *extra, "--query", "q", "--model", "openai/root-model", "--api-base", url]
        return cli, f"%rlm context {path} {' '.join(extra)}".rstrip()

    def model(flags: list[str]) -> tuple[list[str], str]:
        """A model or option case: CLI args with a good context, and the %%rlm cell."""
        return ["--context", ok, "--query", "q", *flags], f"%%rlm {' '.join(flags)}\nWhat is it?"

    cases: dict[str, Case] = {}

    def add(name: str, pair: tuple[list[str], str], *needles: str, **kwargs: Any) -> None:
        cases[name] = Case(pair[0], pair[1], needles, **kwargs)

    add("missing path", ctx(files / "missing.txt"), "No such file", "missing.txt")
    add("glob matching nothing", ctx(files / "*.nothing"), "No file matches")
    add("empty folder", ctx(files / "empty_dir"), "empty_dir", "no files")
    add("folder of binary files", ctx(binaries), "binaries", "binary")
    add("folder of hidden files only", ctx(hidden), "only_hidden", "no files")
    add("binary file", ctx(files / "binary.dat"), "binary.dat", "binary")
    add("not utf-8", ctx(files / "latin.txt"), "latin.txt", "utf-8", "--encoding")
    add("unknown encoding", ctx(files / "latin.txt", "--encoding", "klingon"), "klingon")
    add("empty file", ctx(files / "empty.txt"), "empty.txt", "empty")
    add("larger than free memory", ctx(huge), "GB", "memory")
    add("unknown model", model(["--model", "nosuchprovider/some-model"]), "nosuchprovider/some-model")
    add("model without a provider", model(["--model", "gpt-nonexistent-zzz"]), "gpt-nonexistent-zzz")
    add("missing openai key", model(["--model", "openai/gpt-4o-mini"]), "OPENAI_API_KEY")
    add("missing anthropic key", model(["--model", "anthropic/claude-sonnet-4-5"]), "ANTHROPIC_API_KEY")
    add("rejected key", model(["--model", "openai/root-model", "--api-base", rejecting_url]),
        "OPENAI_API_KEY", "rejected", env={"OPENAI_API_KEY": FAKE_KEY}, exit_code=1)
    unreachable = f"http://127.0.0.1:{free_port()}/v1"
    add("unreachable api base", model(["--model", "openai/root-model", "--api-base", unreachable]),
        "Cannot reach", unreachable)
    for option, value in [("--max-iterations", "0"), ("--concurrency", "many"), ("--max-cost", "-1"),
                          ("--cell-timeout", "0"), ("--max-output-chars", "5"), ("--timeout", "soon"),
                          *NOT_FINITE]:
        add(f"{option} {value}", model(["--model", "openai/root-model", "--api-base", url, option, value]),
            option, value)
    add("unknown option", model(["--model", "openai/root-model", "--no-such-flag"]), "--no-such-flag")
    cases["empty question"] = Case(
        ["--context", ok, "--query", "  ", "--model", "openai/root-model", "--api-base", url],
        f"%%rlm --model openai/root-model --api-base {url}\n", ("query",))
    return cases


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad-input")
    healthy = ScriptedServer(Script()).start()
    rejecting = ScriptedServer(
        lambda body: Reply(status=401, text=f"Incorrect API key provided: {FAKE_KEY}.")).start()
    cases = build_cases(base, healthy.url, rejecting.url)
    kernel_box: dict[str, Any] = {}

    def start_kernel() -> None:
        try:
            kernel_box["kernel"] = Kernel("rlm", base)
            kernel_box["kernel"].import_litellm()
        except BaseException as error:  # noqa: BLE001
            kernel_box["error"] = error

    starter = threading.Thread(target=start_kernel)
    starter.start()
    procs = {}
    for i, (name, case) in enumerate(cases.items()):
        out = base / f"run-{i}.ipynb"
        procs[name] = (start_cli(["run", *case.cli, "-o", str(out), "--quiet"], base, env=clean_env(**case.env)), out)
    results = {}
    for name, (proc, out) in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        results[name] = {"code": proc.returncode, "stdout": stdout, "stderr": stderr, "notebook": out}
    starter.join()
    try:
        if "error" in kernel_box:
            raise kernel_box["error"]
        yield {"cases": cases, "cli": results, "kernel": kernel_box["kernel"]}
    finally:
        if "kernel" in kernel_box:
            kernel_box["kernel"].shutdown()
        healthy.stop()
        rejecting.stop()


CASE_NAMES = [
    "missing path", "glob matching nothing", "empty folder", "folder of binary files",
    "folder of hidden files only", "binary file", "not utf-8", "unknown encoding", "empty file",
    "larger than free memory", "unknown model", "model without a provider", "missing openai key",
    "missing anthropic key", "rejected key", "unreachable api base",
    "--max-iterations 0", "--concurrency many", "--max-cost -1", "--cell-timeout 0",
    "--max-output-chars 5", "--timeout soon", *(f"{o} {v}" for o, v in NOT_FINITE), "unknown option",
    "empty question",
]


def one_sentence(text: str) -> None:
    assert "\n" not in text.strip(), text
    assert 10 < len(text) < 400, text
    assert text.rstrip().endswith("."), text


def test_the_matrix_covers_every_case(matrix):
    assert sorted(matrix["cases"]) == sorted(CASE_NAMES)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli(matrix, name):
    case, run = matrix["cases"][name], matrix["cli"][name]
    stderr = run["stderr"]
    assert run["code"] == case.exit_code, (run["code"], stderr)
    assert "Traceback" not in stderr and run["stdout"].strip() == ""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rlm-kernel: ")
    one_sentence(lines[0])
    for needle in case.needles:
        assert needle in lines[0], (needle, lines[0])
    assert FAKE_KEY not in stderr and "FAKE-badinput" not in stderr
    if case.exit_code == 1:  # the run started: its trajectory is kept, closed with the reason
        nb = nbformat.read(str(run["notebook"]), as_version=4)
        nbformat.validate(nb)
        assert nb.cells[-1].metadata.rlm.reason == "error"
        assert "FAKE-badinput" not in run["notebook"].read_text()
    else:  # refused before the run: nothing half-written
        assert not run["notebook"].exists()


@pytest.mark.kernel
@pytest.mark.parametrize("name", CASE_NAMES)
def test_kernel(matrix, name):
    case, kernel = matrix["cases"][name], matrix["kernel"]
    kernel.execute("context = 'some text'")  # the %%rlm cases need one; %rlm context cases replace it
    if name == "rejected key":
        kernel.execute(f"import os; os.environ['OPENAI_API_KEY'] = {FAKE_KEY!r}")
    try:
        reply, messages = kernel.execute(case.cell)
    finally:
        if name == "rejected key":
            kernel.execute("del os.environ['OPENAI_API_KEY']")
    assert reply["status"] == "error", reply
    assert reply["ename"] == "UsageError", reply
    one_sentence(reply["evalue"])
    for needle in case.needles:
        assert needle in reply["evalue"], (needle, reply["evalue"])
    shown = []
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            shown.append(content["text"])
        elif msg["msg_type"] == "error":
            shown.append("\n".join(content["traceback"]))
        elif msg["msg_type"] in ("display_data", "update_display_data", "execute_result"):
            shown.append(str(content.get("data", {})))
    text = "\n".join(shown)
    assert "Traceback" not in text
    assert len(reply.get("traceback") or []) <= 1
    assert FAKE_KEY not in text and "FAKE-badinput" not in text and FAKE_KEY not in reply["evalue"]
    # the kernel is still fine
    reply, _ = kernel.execute("1 + 1")
    assert reply["status"] == "ok"


# -- an output path that cannot be written: refused before any model call ------------------


def _unwritable_folder() -> Path | None:
    """/sys refuses new files even to root; None where it does not exist."""
    folder = Path("/sys")
    if not folder.is_dir():
        return None
    try:
        (folder / "rlm-probe").touch()
    except OSError:
        return folder
    (folder / "rlm-probe").unlink()
    return None


def output_path(kind: str, base: Path) -> tuple[Path, tuple[str, ...]]:
    """A trajectory path of this kind, and words the refusal must contain."""
    if kind == "a folder":
        folder = base / "existing-folder"
        folder.mkdir(exist_ok=True)
        return folder, ("existing-folder", "folder", "file path")
    if kind == "under a file":
        (base / "a-file.txt").write_text("not a folder")
        return base / "a-file.txt" / "run.ipynb", ("a-file.txt", "is a file, not a folder")
    folder = _unwritable_folder()
    if folder is None:
        pytest.skip("no folder here refuses new files")
    return folder / "run.ipynb", (str(folder / "run.ipynb"), "choose a place you can write to")


OUTPUT_KINDS = ["a folder", "under a file", "unwritable"]


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_cli_output_that_cannot_be_written(tmp_path, kind):
    path, needles = output_path(kind, tmp_path)
    (tmp_path / "doc.txt").write_text("some text")
    with ScriptedServer(Script(root=["FINAL(never asked)"])) as srv:
        done = run_cli(run_args(srv.url, path, sub_model=False), tmp_path, timeout=90)
        assert srv.requests == [], "the run called the model before finding it could not write its notebook"
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and done.stdout.strip() == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlm-kernel: "), done.stderr
    one_sentence(lines[0])
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    if kind == "a folder":
        assert list(path.iterdir()) == []
    assert not list(tmp_path.glob("*.journal.jsonl")) and not list(tmp_path.glob(".rlm-*"))


@pytest.mark.kernel
@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_kernel_output_that_cannot_be_written(matrix, tmp_path, kind):
    path, needles = output_path(kind, tmp_path)
    kernel = matrix["kernel"]
    kernel.execute("context = 'some text'")
    with ScriptedServer(Script(root=["FINAL(never asked)"])) as srv:
        reply, messages = kernel.execute(f"%%rlm --model openai/root-model --api-base {srv.url} --output {path}\nq")
        assert srv.requests == [], "the run called the model before finding it could not write its notebook"
    assert reply["status"] == "error" and reply["ename"] == "UsageError", reply
    one_sentence(reply["evalue"])
    for needle in needles:
        assert needle in reply["evalue"], (needle, reply["evalue"])
    shown = "\n".join(m["content"].get("text", "") + "\n".join(m["content"].get("traceback", []))
                      for m in messages if m["msg_type"] in ("stream", "error"))
    assert "Traceback" not in shown and len(reply.get("traceback") or []) <= 1
    reply, _ = kernel.execute("1 + 1")
    assert reply["status"] == "ok"
    # nothing was left half set up: after a good run and a refused one, a
    # person's own llm_query still works
    with ScriptedServer(Script(root=["FINAL(done)"], sub=lambda prompt: "fine")) as srv:
        reply, _ = kernel.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                                  f"--api-base {srv.url}\nq")
        assert reply["status"] == "ok", reply
        reply, _ = kernel.execute(f"%%rlm --model openai/root-model --api-base {srv.url} --output {path}\nq")
        assert reply["status"] == "error"
        reply, messages = kernel.execute("print(llm_query('hello'))")
    assert reply["status"] == "ok", reply
    assert any("fine" in m["content"].get("text", "") for m in messages if m["msg_type"] == "stream"), messages
