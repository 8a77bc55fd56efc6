"""The notebook format's reference, generated from the published schema
(``rlm_kernel/engine/trajectory/trajectory.schema.json``) so it cannot drift.

``{rlm-schema}``: one section per definition (``schema-NAME``), a row per
key: its type (definitions linked), whether it is required, its meaning.
``{rlm-schema-example} PATH``: a real trajectory notebook (a committed
fixture) annotated: its notebook metadata and one cell of each role as JSON,
then each key with the schema's words for it. The example is checked
against the schema at build time; a break is a build warning (an error in CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _nodes import literal, paragraph, section, table, with_code
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
ORDER = ("notebook", "run", "cell")  # the roots and the run first; then the schema's own order


def _schema() -> dict[str, Any]:
    from rlm_kernel.engine.trajectory.schema import schema

    return schema()


def _def_link(name: str) -> addnodes.pending_xref:
    ref = addnodes.pending_xref("", refdomain="std", reftype="ref", reftarget=f"schema-{name.replace('_', '-')}",
                                refexplicit=True, refwarn=True)
    ref += literal(name)
    return ref


def type_nodes(spec: dict[str, Any]) -> list[nodes.Node]:
    """A property's type in words, with links to the definitions it refers to."""
    if "$ref" in spec:
        return [_def_link(spec["$ref"].rsplit("/", 1)[-1])]
    if "enum" in spec:
        return [nodes.Text("one of "), *_joined([literal(json.dumps(v)) for v in spec["enum"]])]
    kinds = spec.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    out: list[nodes.Node] = []
    for index, kind in enumerate(kinds):
        if index:
            out.append(nodes.Text(" or "))
        if kind == "array" and "items" in spec:
            out += [nodes.Text("array of "), *type_nodes(spec["items"])]
        elif kind == "object" and isinstance(spec.get("additionalProperties"), dict):
            out += [nodes.Text("object of "), *type_nodes(spec["additionalProperties"]), nodes.Text(" by key")]
        else:
            out.append(nodes.Text(kind))
    bounds = [f"≥ {spec['minimum']}" if "minimum" in spec else "",
              f"matching {spec['pattern']}" if "pattern" in spec else "",
              "non-empty" if spec.get("minLength") == 1 else ""]
    if any(bounds):
        out.append(nodes.Text(" (" + ", ".join(b for b in bounds if b) + ")"))
    return out or [nodes.Text("any")]


def _joined(parts: list[nodes.Node], sep: str = ", ") -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for index, part in enumerate(parts):
        if index:
            out.append(nodes.Text(sep))
        out.append(part)
    return out


def conditions(spec: dict[str, Any]) -> list[str]:
    """``allOf`` if/then rules in words (the cell's: these roles need a run id and a step)."""
    said = []
    for rule in spec.get("allOf", []):
        when, then = rule.get("if", {}), rule.get("then", {})
        for key, test in when.get("properties", {}).items():
            values = ", ".join(map(str, test.get("enum", [test.get("const")])))
            said.append(f"When {key} is {values}: {', '.join(then.get('required', []))} required.")
    return said


def described(spec: dict[str, Any]) -> str:
    """A key's meaning: its own description, else its definition's."""
    if spec.get("description"):
        return spec["description"]
    if "$ref" in spec:
        return _schema()["$defs"][spec["$ref"].rsplit("/", 1)[-1]].get("description", "")
    if "items" in spec:
        return described(spec["items"])
    return ""


class SchemaDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from rlm_kernel.engine.trajectory import schema as module

        self.env.note_dependency(str(Path(module.__file__).with_name("trajectory.schema.json")))
        document = _schema()
        defs = document["$defs"]
        names = [*ORDER, *(n for n in defs if n not in ORDER)]
        out: list[nodes.Node] = [paragraph("Schema ", literal(document["$id"]), " (JSON Schema ",
                                           literal(document["$schema"]), "). ", document.get("description", ""))]
        for name in names:
            spec = defs[name]
            part = section(self.state.document, nodes.literal(name, name), f"schema-{name.replace('_', '-')}")
            if spec.get("description"):
                part += with_code(spec["description"])
            properties = spec.get("properties")
            if properties:
                required = set(spec.get("required", []))
                part += table(["key", "type", "required", "meaning"],
                              [[literal(key), type_nodes(value), "yes" if key in required else "",
                                with_code(value.get("description", ""))] for key, value in properties.items()],
                              widths=[20, 26, 12, 42])
            else:
                part += paragraph("Type: ", *type_nodes(spec))
            for rule in conditions(spec):
                part += paragraph(rule)
            out.append(part)
        return out


class SchemaExampleDirective(SphinxDirective):
    """Annotate a real trajectory notebook (the argument: a path from the repository's root)."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from rlm_kernel.engine.trajectory.schema import problems

        path = REPO / self.arguments[0]
        self.env.note_dependency(str(path))
        nb = json.loads(path.read_text(encoding="utf-8"))
        for problem in problems(nb):
            logger.warning(f"the example {self.arguments[0]} breaks the trajectory schema: {problem}",
                           location=self.get_location())
        defs = _schema()["$defs"]
        out: list[nodes.Node] = [self._example("The notebook's metadata.rlm", nb["metadata"]["rlm"],
                                               defs["notebook"], "notebook")]
        seen: set[str] = set()
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("rlm")
            if not meta or meta.get("role") in seen:
                continue
            seen.add(meta.get("role"))
            out.append(self._example(f"A {cell['cell_type']} cell of role {meta.get('role')}", meta, defs["cell"],
                                     "cell"))
        return out

    def _example(self, title: str, value: dict[str, Any], spec: dict[str, Any], root: str) -> nodes.Node:
        text = json.dumps(value, indent=2, ensure_ascii=False)
        container = nodes.container(classes=["rlm-schema-example"])
        container += nodes.rubric("", title)
        container += nodes.literal_block(text, text, language="json")
        rows = [[literal(path), with_code(meaning)] for path, meaning in self._annotations(value, spec, root)]
        container += table(["key", "what it says (from the schema)"], rows, widths=[35, 65])
        return container

    def _annotations(self, value: Any, spec: dict[str, Any], path: str) -> list[tuple[str, str]]:
        defs = _schema()["$defs"]
        while "$ref" in spec:
            spec = defs[spec["$ref"].rsplit("/", 1)[-1]]
        found: list[tuple[str, str]] = []
        if isinstance(value, dict) and "properties" in spec:
            for key, item in value.items():
                sub = spec["properties"].get(key)
                if sub is None:
                    continue
                found.append((f"{path}.{key}", described(sub)))
                found += self._annotations(item, sub, f"{path}.{key}")
        elif isinstance(value, list) and value and "items" in spec:
            found += self._annotations(value[0], spec["items"], f"{path}[0]")
        return found


def publish(app: Sphinx, exception: Exception | None) -> None:
    """Put the schema where its ``$id`` says, relative to the site: ``schema/trajectory-N.json``."""
    if exception is not None or app.builder.format != "html":
        return
    from rlm_kernel.engine.trajectory import schema as module

    name = _schema()["$id"].rsplit("/", 1)[-1]
    target = Path(app.outdir) / "schema" / name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(Path(module.__file__).with_name("trajectory.schema.json").read_bytes())


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", publish)
    app.add_directive("rlm-schema", SchemaDirective)
    app.add_directive("rlm-schema-example", SchemaExampleDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
