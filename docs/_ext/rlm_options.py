"""``{rlm-options}``: every run option, from ``rlm_kernel.engine.runs.options.OPTIONS``.

One section per group (as ``--help`` groups them), one row per option: its
flag, Python keyword and environment variable, default, allowed values and
help. Each row is a target ``opt-NAME`` (``[--max-cost](#opt-max-cost)``
links to it from any page)."""

from __future__ import annotations

from typing import Any

from _nodes import literal, section, table, with_code
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

GROUP_TITLES = {"models": "Models", "budgets": "Budgets and limits", "history": "History (compaction)",
                "trust": "Trust and the sandbox", "where code runs": "Where the code runs", "tools": "Tools",
                "vision": "Vision", "calls": "Model calls"}


def anchor(name: str) -> str:
    return "opt-" + name.replace("_", "-")


def default_text(option: Any) -> str:
    if option.kind == "flag":
        return "off"
    if option.default is not None:
        return option.text(option.default)
    if option.env and option.same_as:
        return f"${option.env}, else as --{option.same_as.replace('_', '-')}"
    if option.env:
        return f"${option.env}"
    if option.same_as:
        return f"as --{option.same_as.replace('_', '-')}"
    return "unset (no limit)" if option.limit else "unset"


def allowed_text(option: Any) -> str:
    if option.kind == "flag":
        return "a switch"
    if option.kind == "tools":
        return "functions, or their names / module:function"
    if option.choices:
        return " | ".join(option.choices)
    if option.kind == "whole":
        return f"whole number ≥ {option.lowest:g}"
    if option.kind == "real":
        return f"number {'>' if option.above else '≥'} {option.lowest:g}"
    return "text"


class OptionsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from rlm_kernel.engine.runs.options import GROUPS, OPTIONS

        self.env.note_dependency(_options_file())
        out: list[nodes.Node] = []
        for group in GROUPS:
            members = [o for o in OPTIONS if o.group == group]
            if not members:
                continue
            part = section(self.state.document, GROUP_TITLES.get(group, group.capitalize()),
                           "options-" + group.replace(" ", "-"))
            part += table(["option", "default", "allowed", "what it sets"],
                          [self._row(o) for o in members], widths=[26, 17, 15, 42])
            out.append(part)
        return out

    def _row(self, option: Any) -> list[Any]:
        target = anchor(option.name)
        name = nodes.inline(ids=[target], names=[target])
        self.state.document.note_explicit_target(name)
        if option.flag:
            name += [literal(option.flag_name), nodes.Text(" · "), literal(option.name)]
        else:
            name += [literal(option.name), nodes.Text(" (Python only)")]
        if option.env:
            name += [nodes.Text(" · env "), literal(f"${option.env}")]
        notes = []
        if option.secret:
            notes.append("never shown, written or recorded")
        if option.limit:
            notes.append("recorded among the run's limits")
        help_text = option.help + (f" ({'; '.join(notes)})" if notes else "")
        return [name, literal(default_text(option)) if option.default is not None or option.kind == "flag"
                else default_text(option), allowed_text(option), with_code(help_text)]


def _options_file() -> str:
    import rlm_kernel.engine.runs.options as module

    return module.__file__


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rlm-options", OptionsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
