"""``{rlm-cli}``: every ``rlm-kernel`` command and flag, from the argparse
parsers ``rlm_kernel.cli`` builds (the same ones ``--help`` prints).

Each command is a section ``cmd-NAME`` (``cmd-bench-suite`` for a command
of a command) with its usage, description and one table per argument
group. The run options, shared by run, serve, batch and mcp, are one line
of links into the options reference instead of a table repeated four times.
:func:`parser_nodes` renders any parser (the magics' reference uses it too)."""

from __future__ import annotations

import argparse
from typing import Any

from _nodes import literal, paragraph, section, table, with_code
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def option_link(name: str, text: str) -> addnodes.pending_xref:
    """A link to the options reference's row of ``name``."""
    ref = addnodes.pending_xref("", refdomain="std", reftype="ref", reftarget="opt-" + name.replace("_", "-"),
                                refexplicit=True, refwarn=True)
    ref += literal(text)
    return ref


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        try:
            text = text % {**vars(action), "prog": prog, "default": action.default}
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _flags(action: argparse.Action) -> str:
    if action.option_strings:
        return ", ".join(action.option_strings)
    return action.metavar if isinstance(action.metavar, str) else action.dest


def _argument(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " | ".join(map(str, action.choices))
    if not action.option_strings:
        return {"?": "optional", "*": "any number", "+": "one or more"}.get(str(action.nargs), "")
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.nargs == "?":
        return f"[{metavar}]"
    return f"{metavar} (repeatable)" if isinstance(action, (argparse._AppendAction, argparse._ExtendAction)) \
        else metavar


def _default(action: argparse.Action) -> str:
    value = action.default
    if value in (None, False, [], argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return str(value)


def run_option_names(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's flags that are run options (rendered as links, not rows)."""
    from rlm_kernel.engine.runs.options import BY_NAME

    return [a.dest for a in parser._actions if a.dest in BY_NAME and a.option_strings
            and a.option_strings[0] == BY_NAME[a.dest].flag_name]


def parser_nodes(parser: argparse.ArgumentParser, note: str = "") -> list[nodes.Node]:
    """Usage, description, argument tables and epilog of one parser."""
    out: list[nodes.Node] = []
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out.append(nodes.literal_block(usage, usage, language="text", classes=["rlm-usage"]))
    if parser.description:
        out.append(paragraph(parser.description))
    if note:
        out.append(paragraph(note))
    shared = set(run_option_names(parser))
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.dest in shared:
                continue
            rows.append([literal(_flags(action)), _argument(action), _default(action),
                         with_code(_help(action, parser.prog))])
        if rows:
            out.append(nodes.rubric("", group.title.capitalize() if group.title else "Arguments"))
            out.append(table(["argument", "value", "default", "what it does"], rows, widths=[24, 18, 12, 46]))
    if shared:
        from rlm_kernel.engine.runs.options import BY_NAME

        line = paragraph("Run options (the same everywhere; see the options reference): ")
        for index, name in enumerate(sorted(shared, key=list(BY_NAME).index)):
            if index:
                line += nodes.Text(", ")
            line += option_link(name, BY_NAME[name].flag_name)
        line += nodes.Text(".")
        out.append(nodes.rubric("", "Run options"))
        out.append(line)
    if parser.epilog:
        out.append(paragraph(parser.epilog))
    return out


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


class CLIDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from rlm_kernel import cli

        self.env.note_dependency(cli.__file__)
        root = cli._parser()
        overview = table(["command", "what it does"],
                         [[self._link(name), help_text] for name, help_text, _ in subcommands(root)],
                         widths=[25, 75])
        out: list[nodes.Node] = [overview]
        for name, help_text, sub in subcommands(root):
            out.append(self._command(["rlm-kernel", name], help_text, sub))
        return out

    def _link(self, name: str) -> addnodes.pending_xref:
        ref = addnodes.pending_xref("", refdomain="std", reftype="ref", reftarget=f"cmd-{name}",
                                    refexplicit=True, refwarn=True)
        ref += literal(f"rlm-kernel {name}")
        return ref

    def _command(self, words: list[str], help_text: str, parser: argparse.ArgumentParser) -> nodes.section:
        title = nodes.literal(" ".join(words), " ".join(words))
        part = section(self.state.document, title, "cmd-" + "-".join(words[1:]))
        part.extend(parser_nodes(parser, note=help_text[:1].upper() + help_text[1:] + "."
                                 if help_text and not parser.description else ""))
        for name, sub_help, sub in subcommands(parser):
            part += self._command([*words, name], sub_help, sub)
        return part


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rlm-cli", CLIDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
