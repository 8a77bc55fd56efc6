"""One way to write tokens, money and unknown prices (rlm_kernel/_words.py);
labextension/test/format.test.ts checks the page's format.ts on the same table."""

from __future__ import annotations

import pytest

from rlm_kernel._words import money, plural, price_text, tokens_text
from rlm_kernel.sinks.display import status_line, subcalls_text

# The same rows are in labextension/test/format.test.ts.
TOKENS = [(0, "0 tok"), (950, "950 tok"), (1000, "1.0k tok"), (12_345, "12.3k tok"), (999_949, "999.9k tok"),
          (999_950, "1.00M tok"), (1_087_800, "1.09M tok")]
MONEY = [(0, "$0"), (0.00042, "$0.00042"), (0.0012, "$0.0012"), (0.0213, "$0.021"), (0.5, "$0.50"),
         (1.25, "$1.25"), (1234.5, "$1,234.50")]


@pytest.mark.parametrize("count, text", TOKENS)
def test_tokens(count, text):
    assert tokens_text(count) == text


@pytest.mark.parametrize("usd, text", MONEY)
def test_money(usd, text):
    assert money(usd) == text


def test_one_way_to_say_a_price_is_unknown():
    assert price_text(0.0213) == "$0.021"
    assert price_text(None) == "price unknown"
    assert price_text(None, 0.0213) == "$0.021 + unknown"


def test_plural():
    assert (plural(1, "step"), plural(2, "step"), plural(1000, "character")) == ("1 step", "2 steps", "1,000 characters")


def test_subcalls_say_done_running_and_queued_until_all_are_done():
    assert subcalls_text({"subcalls": 66, "subcalls_running": 50, "subcalls_queued": 4}) == (
        "66 sub-calls: 12 done, 50 running, 4 queued")
    assert subcalls_text({"subcalls": 66, "subcalls_running": 2}) == "66 sub-calls: 64 done, 2 running"
    assert subcalls_text({"subcalls": 66}) == "66 sub-calls"


def test_the_status_line_has_no_depth_and_one_unit_each():
    line = status_line({"iteration": 3, "max_iterations": 30, "depth": 0, "subcalls": 1, "subcalls_running": 1,
                        "tokens": 48_200, "cost_usd": None, "known_cost_usd": 0.0, "elapsed_s": 67})
    assert line == "RLM · step 3/30 · 1 sub-call: 0 done, 1 running · 48.2k tok · price unknown · 1:07"


def test_the_status_line_says_when_the_run_waits_for_approval():
    line = status_line({"iteration": 2, "max_iterations": 30, "subcalls": 0, "tokens": 950, "cost_usd": None,
                        "elapsed_s": 5, "waiting": "approval", "root": {"phase": "thinking", "elapsed_s": 1}})
    assert line == "RLM · step 2/30 · waiting for approval · 0 sub-calls · 950 tok · price unknown · 0:05"


def test_the_status_line_says_what_was_cached_and_compacted():
    line = status_line({"iteration": 7, "max_iterations": 30, "subcalls": 12, "tokens": 148_200,
                        "cache_read_tokens": 91_000, "cache_write_tokens": 4_000, "compactions": 2,
                        "cost_usd": 0.21, "elapsed_s": 187})
    assert line == "RLM · step 7/30 · 12 sub-calls · 148.2k tok (91.0k cached) · history compacted 2× · $0.21 · 3:07"
    once = status_line({"iteration": 2, "max_iterations": 30, "tokens": 950, "cache_read_tokens": 900,
                        "compactions": 1, "cost_usd": None, "elapsed_s": 5})
    assert once == "RLM · step 2/30 · 0 sub-calls · 950 tok (900 cached) · history compacted · price unknown · 0:05"
