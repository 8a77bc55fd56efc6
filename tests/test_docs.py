"""The documentation: the generated reference holds every run option, every
``rlm-kernel`` command and flag and every ``%rlm`` command, the README's
links point somewhere, and every example has the scripted model the docs
build executes it against.

The reference pages are built with the site's own configuration and
extensions (docs/conf.py, docs/_ext) into a temporary folder, without the
examples; the whole site is built by ``./dev docs`` (a phase of ``./dev test``)."""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlm_kernel.engine.runs.options import OPTIONS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE_PAGES = ("options", "cli", "magics")


class Page(HTMLParser):
    """A built page: its ids, the text under each section id (usage blocks left out: a flag must
    be documented, not only listed), the text of each table row holding an id."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.sections: dict[str, list[str]] = {}
        self.rows: dict[str, list[str]] = {}
        self._open: list[tuple[str, str | None]] = []  # (tag, section id) of open sections
        self._row: list[str] | None = None
        self._row_ids: list[str] = []
        self._pre = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ident = dict(attrs).get("id")
        if ident:
            self.ids.add(ident)
        if tag == "section":
            self._open.append((tag, ident))
            if ident:
                self.sections[ident] = []
        elif tag == "tr":
            self._row, self._row_ids = [], []
        elif tag == "pre":
            self._pre += 1
        if ident and self._row is not None:
            self._row_ids.append(ident)

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._open:
            self._open.pop()
        elif tag == "pre":
            self._pre -= 1
        elif tag == "tr" and self._row is not None:
            for ident in self._row_ids:
                self.rows[ident] = self._row
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._pre:
            return
        for _, ident in self._open:
            if ident:
                self.sections[ident].append(data)
        if self._row is not None:
            self._row.append(data)

    def text(self, section: str) -> str:
        return " ".join(" ".join(self.sections[section]).split())

    def row(self, ident: str) -> str:
        return " ".join(" ".join(self.rows[ident]).split())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Page]:
    """The reference pages of the options, the command line and the magics, built as the site builds them."""
    work = tmp_path_factory.mktemp("docs")
    source = work / "src"
    (source / "reference").mkdir(parents=True)
    for name in REFERENCE_PAGES:
        shutil.copy(DOCS / "reference" / f"{name}.md", source / "reference" / f"{name}.md")
    (source / "index.md").write_text("# Reference\n\n```{toctree}\n" + "".join(
        f"reference/{name}\n" for name in REFERENCE_PAGES) + "```\n", encoding="utf-8")
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", "-n", "-W", "--keep-going", "-c", str(DOCS),
         "-D", "rlm_execute_examples=0", str(source), str(work / "html")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert built.returncode == 0, built.stderr[-3000:]
    return {name: Page((work / "html" / "reference" / f"{name}.html").read_text(encoding="utf-8"))
            for name in REFERENCE_PAGES}


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_run_option_is_in_the_reference_with_its_flag_default_variable_and_help(reference):
    page = reference["options"]
    missing = []
    for option in OPTIONS:
        target = "opt-" + option.name.replace("_", "-")
        if target not in page.rows:
            missing.append(f"{option.name}: no row")
            continue
        row = page.row(target)
        wanted = [option.name, _words(option.help)]
        if option.flag:
            wanted.append(option.flag_name)
        if option.env:
            wanted.append(f"${option.env}")
        if option.default is not None and option.kind != "flag":
            wanted.append(option.text(option.default))
        if option.choices:
            wanted += list(option.choices)
        missing += [f"{option.name}: {word!r}" for word in wanted if word not in row]
    assert missing == []


def _commands(parser: argparse.ArgumentParser, words: list[str]) -> list[tuple[list[str], argparse.ArgumentParser]]:
    found = [(words, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, [*words, name])
    return found


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    """What the reference must show of each argument: every option string, or a positional's name."""
    shown = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        shown += action.option_strings or [action.metavar if isinstance(action.metavar, str) else action.dest]
    return shown


def test_every_command_and_flag_of_rlm_kernel_is_in_the_reference(reference):
    from rlm_kernel.cli import _parser

    page = reference["cli"]
    commands = _commands(_parser(), ["rlm-kernel"])[1:]
    assert len(commands) >= 18  # run, lab, export, serve, batch, mcp, import, bench and its ten
    missing = []
    for words, parser in commands:
        section = "cmd-" + "-".join(words[1:])
        if section not in page.sections:
            missing.append(f"{' '.join(words)}: no section")
            continue
        text = page.text(section)
        missing += [f"{' '.join(words)} {flag}" for flag in _arguments(parser) if flag not in text]
        if parser.description:
            assert _words(parser.description) in text, words
    assert missing == []


def _line_magic_commands() -> set[str]:
    """The commands `%rlm` accepts, read from its dispatcher (``command == "..."`` and the help words)."""
    from rlm_kernel.kernel import magics

    tree = ast.parse(Path(magics.__file__).read_text(encoding="utf-8"))
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "rlm")
    found = {"help"}
    for node in ast.walk(method):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "command":
            found |= {c.value for c in node.comparators if isinstance(c, ast.Constant)}
    return found


def test_every_rlm_magic_command_and_flag_is_in_the_reference(reference):
    from rlm_kernel.kernel import magics
    from rlm_kernel.kernel.cell_runs import run_parser
    from rlm_kernel.kernel.continuing import continue_parser

    page = reference["magics"]
    commands = _line_magic_commands()
    assert {"context", "replay", "continue", "help"} <= commands
    assert sorted(c for c in commands if f"magic-{c}" not in page.ids) == []
    assert "magic-rlm-cell" in page.ids
    missing = []
    for section, parser in (("rlm-cell-flags", run_parser()), ("rlm-continue-flags", continue_parser()),
                            ("rlm-context-flags", magics._context_parser())):
        text = page.text(section)
        missing += [f"{parser.prog} {flag}" for flag in _arguments(parser) if flag not in text]
    assert missing == []


def test_the_magic_check_reads_the_dispatcher():
    """The dispatcher's commands as the check sees them (a new `command == "x"` branch adds x)."""
    assert _line_magic_commands() == {"context", "replay", "continue", "help"}


# -- README links ------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def heading_anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub and MyST make them (a repeated one gets -1, -2...)."""
    from myst_parser.slugs import github_slugify

    anchors: set[str] = set()
    fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(("```", "~~~")):
            fence = not fence
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fence:
            slug, n = github_slugify(heading.group(1).strip()), 1
            base = slug
            while slug in anchors:
                slug, n = f"{base}-{n}", n + 1
            anchors.add(slug)
    return anchors


def broken_links(markdown: Path) -> list[str]:
    """Each relative link of a Markdown file whose file or anchor does not exist."""
    broken = []
    for target in LINK.findall(markdown.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # external (https:, mailto:): not visited
        path, _, anchor = target.partition("#")
        file = (markdown.parent / path).resolve() if path else markdown
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file):
            broken.append(f"{target}: no such heading in {file.name}")
    return broken


def test_every_readme_link_points_somewhere():
    readme = ROOT / "README.md"
    assert len(LINK.findall(readme.read_text(encoding="utf-8"))) > 40
    assert broken_links(readme) == []


def test_the_link_check_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "page.md").write_text("# A page\n\n## Its part\n\n## Its part\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("# Top\n\n[ok](page.md#its-part) [ok](page.md#its-part-1) [ok](#top) [web](https://x.org/y)\n"
                      "[gone](nowhere.md) [bad](page.md#no-part) [self](#missing) ![img](pic.png)\n", encoding="utf-8")
    found = broken_links(readme)
    assert [f.split(":")[0] for f in found] == ["nowhere.md", "page.md#no-part", "#missing", "pic.png"]


# -- the examples and the notebook format ----------------------------------------------------

def _scripted_examples() -> set[str]:
    """The examples the docs build has a scripted model for: the table
    tests/test_examples.py runs them with (tests/_example_models.py)."""
    from _example_models import RESPONDERS

    return set(RESPONDERS)


def test_every_example_has_the_scripted_model_the_docs_build_executes_it_against():
    examples = {p.name for p in (ROOT / "examples").glob("*.ipynb")}
    assert _scripted_examples() == examples
    listed = (DOCS / "examples" / "index.md").read_text(encoding="utf-8")
    assert sorted(n for n in examples if f"({n})" not in listed) == []


def test_the_notebook_format_page_has_an_entry_for_the_format_written_today():
    from rlm_kernel.engine.trajectory.schema import FORMAT

    page = (DOCS / "reference" / "notebook-format.md").read_text(encoding="utf-8")
    assert f"\nFormat {FORMAT}\n: " in page, f"docs/reference/notebook-format.md: say what changed in format {FORMAT}"
