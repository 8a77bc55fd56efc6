"""Loading and describing the context; the root model is told the context's
shape (type, total characters, parts) and never sees its text."""

from __future__ import annotations

import json

import pytest
from _helpers import repl

from rlm_kernel.context.files import load_context
from rlm_kernel.engine.protocol.prompts import describe_context, first_message
from rlm_kernel.errors import ContextError
from rlm_kernel.testing.server import prompt_text

# -- loading files ----------------------------------------------------------------


def test_one_file_is_a_str(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("hello\nworld\n", encoding="utf-8")
    loaded = load_context([str(path)])
    assert loaded.value == "hello\nworld\n"
    assert loaded.sources == [str(path)]
    assert loaded.chars == 12


def test_several_files_are_a_list_in_the_given_order(tmp_path):
    (tmp_path / "b.txt").write_text("bee")
    (tmp_path / "a.txt").write_text("ay")
    loaded = load_context([str(tmp_path / "b.txt"), str(tmp_path / "a.txt")])
    assert loaded.value == ["bee", "ay"]
    assert loaded.chars == 5


def test_directory_is_walked_sorted_and_hidden_files_skipped(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "2.txt").write_text("two")
    (tmp_path / "1.txt").write_text("one")
    (tmp_path / ".hidden").write_text("secret")
    loaded = load_context([str(tmp_path)])
    assert loaded.value == ["one", "two"]
    assert [p.rsplit("/", 1)[-1] for p in loaded.sources] == ["1.txt", "2.txt"]


def test_glob(tmp_path):
    for name in ("c.md", "a.md", "b.txt"):
        (tmp_path / name).write_text(name)
    loaded = load_context([str(tmp_path / "*.md")])
    assert loaded.value == ["a.md", "c.md"]


def test_directory_skips_binary_files(tmp_path):
    (tmp_path / "text.txt").write_text("words")
    (tmp_path / "image.bin").write_bytes(b"\x89PNG\x00\x00\x01")
    assert load_context([str(tmp_path)]).value == ["words"]


@pytest.mark.parametrize("setup, message", [
    (lambda d: str(d / "missing.txt"), "No such file"),
    (lambda d: str(d / "*.nothing"), "No file matches"),
    (lambda d: (d / "bin.dat").write_bytes(b"ab\x00cd") and str(d / "bin.dat"), "binary"),
    (lambda d: (d / "latin.txt").write_bytes("caf\xe9".encode("latin-1")) and str(d / "latin.txt"), "utf-8"),
    (lambda d: (d / "empty.txt").write_text("") is not None and str(d / "empty.txt"), "empty"),
    (lambda d: (d / "emptydir").mkdir() or str(d / "emptydir"), "no files"),
])
def test_bad_inputs_give_one_clear_sentence(tmp_path, setup, message):
    path = setup(tmp_path)
    with pytest.raises(ContextError) as info:
        load_context([path])
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_encoding_option(tmp_path):
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert load_context([str(tmp_path / "latin.txt")], encoding="latin-1").value == "caf\xe9"


# -- describing it ----------------------------------------------------------------


def test_describe_str():
    assert describe_context("x" * 200_000) == "`context` is a str of 200,000 characters."


def test_describe_list_gives_parts_and_their_lengths():
    text = describe_context(["a" * 10, "b" * 2000, "c" * 30])
    assert "list of 3 items" in text
    assert "2,040 characters in total" in text
    assert "10, 2,000, 30" in text


def test_describe_many_parts_summarises_lengths():
    text = describe_context(["x" * i for i in range(1, 101)])
    assert "100 items" in text and "min 1" in text and "max 100" in text


def test_describe_dict():
    text = describe_context({"alpha": "x" * 5, "beta": ["y" * 7]})
    assert "dict with 2 keys" in text and "'alpha'" in text and "12 characters" in text


def test_describe_with_sources():
    assert "loaded from: a.txt, b.txt" in describe_context(["1", "2"], ["a.txt", "b.txt"])


def test_first_message_has_description_and_query_but_no_content():
    message = first_message("SECRET-CONTENT " * 100, "How many words?")
    assert "str of 1,500 characters" in message
    assert "How many words?" in message
    assert "SECRET-CONTENT" not in message


# -- end to end: what the root model receives -------------------------------------


SENTINEL = "ZQX-SENTINEL-93b1f7"


def big_context() -> str:
    filler = "The quick brown fox jumps over the lazy dog. " * 5000  # 225,000 characters
    middle = len(filler) // 2
    return filler[:middle] + SENTINEL + filler[middle:]


def test_context_text_never_reaches_the_root_model(run_rlm):
    context = big_context()
    assert len(context) > 200_000
    root = [
        repl("print(type(context), len(context))\nprint(context[:60])"),
        # The sub-model may see the context; the root model only what code prints.
        repl(f"i = context.find({SENTINEL[:7]!r})\nhit = llm_query(context[i-100:i+100])\nprint(i > 0, len(hit))"),
        "FINAL(done)",
    ]
    result, srv = run_rlm(root=root, context=context, query="Find the odd token.")
    assert result.reason == "final"
    roots = srv.calls("root-model")
    assert len(roots) == 3
    for body in roots:
        text = json.dumps(body)
        assert SENTINEL not in text
        assert len(text) < 30_000  # a 225k context would not fit; only metadata and outputs do
    # the sub-call did carry the slice with the sentinel (so the scan above could fail)
    assert any(SENTINEL in prompt_text(b) for b in srv.calls("sub-model"))


def test_first_user_message_describes_the_context(run_rlm):
    parts = ["alpha " * 100, "beta " * 300, "gamma " * 50]
    result, srv = run_rlm(root=["FINAL(x)"], context=parts, query="Which part is longest?")
    first = srv.calls("root-model")[0]["messages"]
    assert first[0]["role"] == "system"
    assert "context" in first[0]["content"] and "llm_query" in first[0]["content"]
    user = first[1]
    assert user["role"] == "user"
    assert "list of 3 items" in user["content"]
    assert f"{sum(map(len, parts)):,} characters" in user["content"]
    assert ", ".join(f"{len(p):,}" for p in parts) in user["content"]
    assert "Which part is longest?" in user["content"]
    assert "alpha alpha" not in user["content"]


def test_only_a_context_of_documents_gets_the_documents_paragraph_in_the_system_prompt(tmp_path):
    """How to slice by page and cite is told when the context holds documents
    loaded from files; a plain text's run pays no tokens for it."""
    from rlm_kernel.engine.protocol.prompts import DOCUMENTS, SYSTEM_PROMPT, system_prompt

    assert system_prompt("plain text") == SYSTEM_PROMPT and DOCUMENTS not in SYSTEM_PROMPT
    assert system_prompt(["a", "b"]) == SYSTEM_PROMPT
    (tmp_path / "notes.md").write_text("# Notes\n\nsome text\n")
    assert system_prompt(load_context([str(tmp_path / "notes.md")]).value) == SYSTEM_PROMPT  # text has no pages
    pytest.importorskip("pandas")
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    assert system_prompt(load_context([str(tmp_path / "notes.md"), str(tmp_path / "t.csv")]).value).endswith(DOCUMENTS)
