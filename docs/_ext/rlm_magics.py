"""``{rlm-magics}``: the ``%rlm`` line magic's commands and the flags of
``%%rlm``, ``%rlm continue`` and ``%rlm context``, from the code: the usage
text ``%rlm help`` prints (``rlm_kernel.kernel.magics.USAGE``) and the
parsers the magics parse their lines with. Each command is a target
``magic-NAME`` (``magic-rlm-cell`` for ``%%rlm``)."""

from __future__ import annotations

import re
from typing import Any

from _nodes import literal, section, table, with_code
from docutils import nodes
from rlm_cli import parser_nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def usage_lines() -> list[tuple[str, str, str]]:
    """(command, syntax, what it does) for each line of ``%rlm help``."""
    from rlm_kernel.kernel.magics import USAGE

    found = []
    for line in USAGE.strip().splitlines():
        syntax, *what = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        words = syntax.split()
        command = "rlm-cell" if words[0] == "%%rlm" else words[1]
        found.append((command, syntax, " ".join(what).strip()))
    # `%rlm help` prints the lines above (USAGE itself), so they do not list it
    found.append(("help", "%rlm help [run]", "print the lines above; with run, every flag of %%rlm (below)"))
    return found


class MagicsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from rlm_kernel.kernel import magics
        from rlm_kernel.kernel.cell_runs import run_parser
        from rlm_kernel.kernel.continuing import continue_parser

        self.env.note_dependency(magics.__file__)
        rows, seen = [], set()
        for command, syntax, what in usage_lines():
            target = f"magic-{command}"
            cell = nodes.inline(ids=[target], names=[target]) if target not in seen else nodes.inline()
            if target not in seen:
                self.state.document.note_explicit_target(cell)
            seen.add(target)
            cell += literal(syntax)
            rows.append([cell, with_code(what)])
        out: list[nodes.Node] = [table(["in a cell", "what it does"], rows, widths=[45, 55])]
        helps = [("%%rlm", "rlm-cell-flags", run_parser()),
                 ("%rlm continue", "rlm-continue-flags", continue_parser()),
                 ("%rlm context", "rlm-context-flags", magics._context_parser())]
        for title, anchor, parser in helps:
            part = section(self.state.document, nodes.literal(title, title), anchor)
            part.extend(parser_nodes(parser))
            out.append(part)
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rlm-magics", MagicsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
