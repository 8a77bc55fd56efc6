"""Resuming a saved run headless (``RLM.resume`` and ``rlm-kernel run
--resume``) and approving steps (``--approve``), against the scripted server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _cli import run_args, run_cli
from _helpers import Router, clean_env, repl

from rlm_kernel.testing.server import ScriptedServer

FAKE_KEY = "sk-test-resume-0000"


def _sub(prompt: str) -> str:
    return f"sub: {prompt[:40]}"


def _first_run(tmp_path: Path, make_rlm: Any, server: Any) -> tuple[Path, Any]:
    (tmp_path / "doc.txt").write_text("apples and pears\n" * 40, encoding="utf-8")
    srv = server(Router({"root-model": [
        repl("chunks = [context[:30], context[30:60]]\nnotes = llm_query_batched(chunks)\nprint(len(notes), 'notes')",
             prose="I split the text."),
        repl("total = 2 * 21\nprint('total', total)"),
        "FINAL_VAR(total)",
    ]}, sub=_sub))
    from rlm_kernel.context.files import load_context

    loaded = load_context([str(tmp_path / "doc.txt")])
    path = tmp_path / "first.ipynb"
    result = make_rlm(srv).completion(loaded.value, "Count things.", output=path, sources=loaded.sources)
    assert result.reason == "final"
    return path, srv


def _index(nb: Any, role: str, step: int) -> int:
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("rlm", {})
        if meta.get("role") == role and meta.get("step") == step:
            return i
    raise AssertionError(f"no {role} cell for step {step}")


def test_resume_replays_the_prefix_and_continues_from_a_cell(tmp_path, make_rlm, server):
    path, first = _first_run(tmp_path, make_rlm, server)
    nb = nbformat.read(path, as_version=4)
    upto = _index(nb, "code", 1)
    # a person edits step 1's code and adds a note after it, in the file; the
    # saved outputs are stale (the edit was never run), so only the resumed
    # run's re-run of the cell can print "edited output 14"
    nb.cells[upto].source += "\nprint('edited output', len(notes) * 7)"
    nb.cells[upto].outputs = [nbformat.v4.new_output("stream", name="stdout", text="STALE OUTPUT\n")]
    nb.cells.insert(upto + 1, nbformat.v4.new_markdown_cell("Please double-check the pears."))
    nbformat.write(nb, path)

    seen: list[str] = []

    def root(body: dict[str, Any]) -> str:
        seen.append("\n".join(str(m.get("content")) for m in body["messages"]))
        return "FINAL(resumed answer)"

    srv = server(Router({"root-model": [root]}, sub=_sub))
    out = tmp_path / "resumed.ipynb"
    result = make_rlm(srv).resume(path, from_cell=upto + 1, output=out)
    assert result.reason == "final" and result.answer == "resumed answer"
    assert srv.calls("sub-model") == [], "the prefix's sub-calls were not replayed"
    assert (result.replayed_subcalls, result.subcalls) == (2, 0)
    history = seen[0]
    assert "Please double-check the pears." in history
    assert "edited output 14" in history, "the history does not show the edited cell's new output"
    assert "STALE OUTPUT" not in history
    assert "total = 2 * 21" not in history  # the old continuation is not part of it

    saved = nbformat.read(out, as_version=4)
    nbformat.validate(saved)
    roles = [(c.metadata.get("rlm", {}).get("role"), c.metadata.get("rlm", {}).get("superseded", False))
             for c in saved.cells]
    new_answer = next(i for i, c in enumerate(saved.cells)
                      if "resumed answer" in c.source and c.metadata["rlm"].get("role") == "answer")
    # the new step (its prose, then the answer) comes right after the note
    assert saved.cells[upto + 2].metadata["rlm"]["role"] == "thought", roles
    assert new_answer == upto + 3, roles
    old = [c for c in saved.cells[new_answer + 1:] if c.metadata.get("rlm", {}).get("role") in ("thought", "code")]
    assert old and all(c.metadata["rlm"]["superseded"] for c in old)
    assert "edited output 14" in "".join(o.get("text", "") for o in saved.cells[upto].outputs)
    replayed = saved.cells[upto].metadata["rlm"]["subcalls"]
    assert [r["replayed"] for r in replayed] == [True, True]
    assert len(saved.metadata["rlm"]["runs"]) == 2
    assert saved.metadata["rlm"]["runs"][-1]["replayed_subcalls"] == 2


def test_resume_keeps_a_pin_with_an_edited_prompt(tmp_path, make_rlm, server):
    path, _ = _first_run(tmp_path, make_rlm, server)
    nb = nbformat.read(path, as_version=4)
    upto = _index(nb, "code", 1)
    record = nb.cells[upto].metadata["rlm"]["subcalls"][0]
    record.update(response="PINNED BY A PERSON", pinned=True, edited_prompt="Say what the fruit is.")
    nbformat.write(nb, path)
    srv = server(Router({"root-model": ["```repl\nprint(notes[0])\n```\nFINAL(done)"]}, sub=_sub))
    out = tmp_path / "pinned.ipynb"
    result = make_rlm(srv).resume(path, from_cell=upto, output=out, replay=False)
    assert result.reason == "final"
    assert len(srv.calls("sub-model")) == 1  # replay off: the unpinned call is made again, the pinned one not
    saved = nbformat.read(out, as_version=4)
    rerun = saved.cells[upto].metadata["rlm"]["subcalls"][0]
    assert rerun["pinned"] and rerun["response"] == "PINNED BY A PERSON"
    assert rerun["edited_prompt"] == "Say what the fruit is."
    printed = [c for c in saved.cells if c.metadata.get("rlm", {}).get("role") == "code" and "notes[0]" in c.source]
    assert "PINNED BY A PERSON" in "".join(o.get("text", "") for o in printed[-1].outputs)


def test_resume_without_replay_and_dropping_the_old_continuation(tmp_path, make_rlm, server):
    path, _ = _first_run(tmp_path, make_rlm, server)
    nb = nbformat.read(path, as_version=4)
    upto = _index(nb, "code", 1)
    srv = server(Router({"root-model": ["FINAL(again)"]}, sub=_sub))
    out = tmp_path / "fresh.ipynb"
    result = make_rlm(srv).resume(path, from_cell=upto, output=out, replay=False, drop_old=True)
    assert result.reason == "final"
    assert len(srv.calls("sub-model")) == 2
    saved = nbformat.read(out, as_version=4)
    assert not any(c.metadata.get("rlm", {}).get("superseded") for c in saved.cells)
    assert "total = 2 * 21" not in "".join(c.source for c in saved.cells)


def _cli(args: list[str], cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd, env=clean_env(OPENAI_API_KEY=FAKE_KEY), input=stdin)


def test_cli_resume_from_a_cell_index(tmp_path, make_rlm, server):
    path, _ = _first_run(tmp_path, make_rlm, server)
    with ScriptedServer(Router({"root-model": ["FINAL(cli resumed)"]}, sub=_sub)) as srv:
        out = tmp_path / "cli.ipynb"
        done = _cli(["run", "--resume", str(path), "--from-cell", "3", "--api-base", srv.url, "-o", str(out),
                     "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["answer"] == "cli resumed" and result["notebook"] == str(out)
        assert (result["replayed_subcalls"], result["subcalls"]) == (2, 0)
        assert "rlm-kernel: 2 sub-calls replayed from the notebook, 0 new." in done.stderr
        assert srv.calls("sub-model") == []
        assert FAKE_KEY not in out.read_text() + done.stdout + done.stderr


@pytest.mark.parametrize("args, needle", [
    (["--resume", "missing.ipynb"], "No such notebook"),
    (["--resume", "plain.ipynb"], "no RLM run to resume"),
    (["--resume", "first.ipynb", "--from-cell", "99"], "There is no cell 99"),
    (["--resume", "first.ipynb", "--query", "x", "--from-cell", "3"], "leave out --from-cell"),
])
def test_cli_resume_errors_are_one_sentence(tmp_path, make_rlm, server, args, needle):
    _first_run(tmp_path, make_rlm, server)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), tmp_path / "plain.ipynb")
    done = _cli(["run", *args, "--model", "openai/root-model"], tmp_path)
    assert done.returncode == 2, done
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_cli_approve_skip_edit_and_run(tmp_path):
    (tmp_path / "doc.txt").write_text("text\n", encoding="utf-8")
    script = Router({"root-model": [
        repl("print('first block ran')"),
        repl("print('second block as written')"),
        repl("print('third block ran')"),
        "FINAL(approved run)",
    ]}, sub=_sub)
    with ScriptedServer(script) as srv:
        out = tmp_path / "approved.ipynb"
        answers = "s\ne\nprint('second block, edited')\n\n"
        done = _cli([*run_args(srv.url, out, sub_model=False), "--approve", "--json"], tmp_path, stdin=answers)
        assert done.returncode == 0, done.stderr
        assert "Run this code?" in done.stderr
        nb = nbformat.read(out, as_version=4)
        code = [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == "code"]
        assert code[0].metadata["rlm"]["status"] == "skipped" and code[0].metadata["rlm"]["approved"] is False
        assert code[0].metadata["rlm"]["skipped"] == "the user chose not to run it"
        assert [o["data"]["text/plain"] for o in code[0].outputs] == ["This code block was not run: the user chose not to run it."]
        assert code[1].source == "print('second block, edited')" and code[1].metadata["rlm"]["edited"] is True
        assert "second block, edited" in code[1].outputs[0]["text"]
        assert code[2].metadata["rlm"]["approved"] is True and "third block ran" in code[2].outputs[0]["text"]
        feedback = "\n".join(str(m["content"]) for m in srv.calls("root-model")[1]["messages"])
        assert "This code block was not run: the user chose not to run it." in feedback


def test_cli_approve_stop_ends_the_run(tmp_path):
    (tmp_path / "doc.txt").write_text("text\n", encoding="utf-8")
    with ScriptedServer(Router({"root-model": [repl("print('never')")]}, sub=_sub)) as srv:
        out = tmp_path / "stopped.ipynb"
        done = _cli([*run_args(srv.url, out, sub_model=False), "--approve", "--json"], tmp_path, stdin="t\n")
        assert done.returncode == 1
        assert json.loads(done.stdout)["reason"] == "interrupted"
        nb = nbformat.read(out, as_version=4)
        assert "never" not in json.dumps([c.get("outputs") for c in nb.cells])
        [code] = [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == "code"]
        assert code.metadata["rlm"]["skipped"] == "the run was stopped at its approval prompt"
        assert [o["data"]["text/plain"] for o in code.outputs] == [
            "This code block was not run: the run was stopped at its approval prompt."]


def test_cli_approve_on_a_terminal_keeps_stdout_pure_json(tmp_path):
    """``--approve --json`` with stdin on a terminal (a pseudo-terminal here):
    the code, the question and the editor go to stderr or the terminal, so
    stdout is exactly the JSON result."""
    import os
    import pty

    (tmp_path / "doc.txt").write_text("text\n", encoding="utf-8")
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\np = sys.argv[1]\ns = open(p).read().replace('as written', 'edited')\n"
                      "open(p, 'w').write(s)\nprint('EDITOR SCREEN')\n", encoding="utf-8")
    script = Router({"root-model": [repl("print('one as written')"), repl("print('two ran')"),
                                    "FINAL(approved on a terminal)"]}, sub=_sub)
    master, slave = pty.openpty()
    try:
        with ScriptedServer(script) as srv:
            os.write(master, b"e\n\n")  # edit the first block, run the second
            done = run_cli([*run_args(srv.url, tmp_path / "tty.ipynb", sub_model=False), "--approve", "--json"],
                           tmp_path, env=clean_env(OPENAI_API_KEY=FAKE_KEY, EDITOR=f"{sys.executable} {editor}"),
                           stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # nothing else on stdout
    assert result["answer"] == "approved on a terminal"
    assert "Run this code?" in done.stderr and "print('one as written')" in done.stderr
    assert "EDITOR SCREEN" in done.stderr
    nb = nbformat.read(tmp_path / "tty.ipynb", as_version=4)
    code = [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == "code"]
    assert code[0].source == "print('one edited')" and "one edited" in code[0].outputs[0]["text"]
    assert "two ran" in code[1].outputs[0]["text"]
