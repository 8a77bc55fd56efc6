"""Long prompts folded around a call's own part (rlm_kernel/widgets/text_fold.py)."""

from __future__ import annotations

from rlm_kernel.widgets.text_fold import (
    AROUND,
    EDGE,
    FOLD_FROM,
    OPEN_CHARS,
    Shared,
    fold,
    fold_html,
    shared_parts,
)

INSTRUCTIONS = "Summarise this book of the Bible in one line, quoting its first proper name.\n" * 12
BOOKS = {"Genesis": "In the beginning God created the heaven and the earth. " * 1200,
         "Ruth": "Now it came to pass in the days when the judges ruled. " * 40,
         "Psalms": "Blessed is the man that walketh not in the counsel of the ungodly. " * 3400}
ENDING = "\n\nAnswer in one line."


def _prompts() -> dict[str, str]:
    return {name: f"{INSTRUCTIONS}\n=== {name} ===\n{text}{ENDING}" for name, text in BOOKS.items()}


def _shown(text: str, parts) -> str:
    return "".join(text[p.start:p.end] for p in parts if not p.folded)


def test_a_batch_shares_its_instructions_and_its_ending() -> None:
    shared = shared_parts(list(_prompts().values()))
    # every book ends its last sentence with ". ", so that is shared too
    assert shared == Shared(head=len(INSTRUCTIONS) + len("\n=== "), tail=len(". " + ENDING), prompts=3)
    assert shared_parts(["only one"]) == Shared()
    # prompts that share everything but one character
    assert shared_parts(["abcXdef", "abcYdef"]) == Shared(3, 3, 2)
    # a prompt that is the start of another: head and tail never overlap
    same = shared_parts(["abc", "abcabc"])
    assert same.head + same.tail <= 3


def test_a_long_prompt_shows_its_own_part_with_a_little_around_it() -> None:
    prompts = _prompts()
    shared = shared_parts(list(prompts.values()))
    psalms = prompts["Psalms"]
    head, tail = shared.bounds(psalms)
    parts = fold(psalms, head, tail)
    # parts cover the prompt, in order
    assert parts[0].start == 0 and parts[-1].end == len(psalms)
    assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
    assert [p.kind for p in parts] == ["head", "shown", "own", "shown"]
    shown = _shown(psalms, parts)
    assert "=== Psalms ===\nBlessed is the man" in shown
    assert INSTRUCTIONS[-AROUND + 20:] in shown and INSTRUCTIONS[:200] not in shown
    assert shown.endswith(ENDING) and len(shown) <= 2 * AROUND + 2 * EDGE + 10
    own = next(p for p in parts if p.kind == "own")
    assert own.end - own.start == len(psalms) - head - tail - 2 * EDGE


def test_short_prompts_are_not_folded_and_a_single_long_one_shows_both_ends() -> None:
    assert [p.kind for p in fold("short prompt")] == ["shown"]
    assert [p.kind for p in fold("x" * FOLD_FROM)] == ["shown"]
    text = "".join(f"{i:06d} " for i in range(40_000))
    parts = fold(text)
    assert [(p.kind, p.end - p.start) for p in parts] == [
        ("shown", EDGE), ("middle", len(text) - 2 * EDGE), ("shown", EDGE)]


def test_a_rewritten_prompt_keeps_the_shared_parts_only_if_it_kept_them() -> None:
    prompts = _prompts()
    shared = shared_parts(list(prompts.values()))
    ruth = prompts["Ruth"]
    kept = ruth.replace("judges ruled", "kings ruled")
    assert shared.bounds(kept, ruth) == (shared.head, shared.tail)
    assert shared.bounds("Tell me about Ruth.", ruth) == (0, 0)
    assert shared.bounds("Tell me about Ruth. " + ENDING, ruth) == (0, shared.tail)


def test_folds_open_on_their_text_escaped_and_clipped() -> None:
    text = "<b>" + "y" * 60_000 + "</b>"
    html = fold_html(text, fold(text))
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert "<details class='rlm-sc-fold' data-kind='middle'>" in html
    assert f"{len(text) - 2 * EDGE:,} more characters" in html
    assert html.count("y") < OPEN_CHARS + 2 * EDGE + 100
    assert f"{len(text) - 2 * EDGE - OPEN_CHARS:,} more characters folded" in html
