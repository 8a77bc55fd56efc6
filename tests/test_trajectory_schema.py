"""The trajectory format as a published JSON Schema
(rlm_kernel/engine/trajectory/trajectory.schema.json): the schema is valid,
every fixture notebook and every notebook a run writes follows it (the suite
sets RLM_CHECK_TRAJECTORY, so every write in a test is checked), a break is
named where it is, and a notebook of a newer format is refused in one
sentence naming the versions."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from _cli import run_args, run_cli
from _helpers import repl

from rlm_kernel.engine.trajectory import schema
from rlm_kernel.errors import RLMError

FILES = Path(__file__).parent / "files"
FIXTURES = sorted(FILES.glob("*.ipynb"))


def test_the_schema_is_a_valid_json_schema_shipped_in_the_package() -> None:
    document = schema.schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$id"].endswith(f"trajectory-{schema.FORMAT}.json")
    assert {"notebook", "cell", "subcall", "child", "run"} <= set(document["$defs"])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_fixture_notebook_follows_the_schema(path: Path) -> None:
    nb = json.loads(path.read_text())
    assert nb["metadata"]["rlm"]["runs"], "a fixture is a trajectory"
    assert list(schema.problems(nb)) == []


def test_a_break_of_the_schema_is_named_where_it_is() -> None:
    nb = json.loads((FILES / "child_run.ipynb").read_text())
    broken = copy.deepcopy(nb)
    code = next(i for i, c in enumerate(broken["cells"]) if c["metadata"].get("rlm", {}).get("subcalls"))
    del broken["cells"][code]["metadata"]["rlm"]["subcalls"][0]["prompt_hash"]
    broken["cells"][0]["metadata"]["rlm"]["role"] = "robot"
    broken["metadata"]["rlm"]["runs"][0]["reason"] = "bored"
    found = list(schema.problems(broken))
    assert any("metadata.rlm.runs[0].reason" in p and "bored" in p for p in found), found
    assert any(f"cell {code} " in p and "prompt_hash" in p for p in found), found
    assert any("cell 0 " in p and "robot" in p for p in found), found
    with pytest.raises(RLMError, match="does not follow the trajectory schema"):
        schema.check(broken)


def test_a_notebook_a_run_writes_follows_the_schema_with_batches_children_and_images(run_rlm, tmp_path) -> None:
    """Beside the check on every write, one run with most of the format's
    parts, checked here by hand."""
    out = tmp_path / "run.ipynb"
    root = [repl("parts = llm_query_batched(['a', 'b'])\nkid = rlm_query('child task')\nprint(parts, kid)"),
            "FINAL(done)"]
    result, _ = run_rlm(root=root, sub=lambda prompt: "FINAL(sub answer)" if "child" in prompt else "ok",
                        output=out)
    assert result.reason == "final"
    nb = json.loads(out.read_text())
    assert nb["metadata"]["rlm"]["format"] == schema.FORMAT
    assert list(schema.problems(nb)) == []
    records = [r for c in nb["cells"] for r in c["metadata"].get("rlm", {}).get("subcalls", [])]
    assert any(r.get("kind") == "rlm" and r.get("child") for r in records) and any(r.get("batch") for r in records)


def test_a_run_whose_metadata_breaks_the_schema_is_not_written_in_the_suite(tmp_path) -> None:
    """The check on every write is on in the suite: a notebook that breaks
    the schema is refused before it is written."""
    from rlm_kernel.sinks.notebook import write_notebook

    nb = json.loads((FILES / "finished.ipynb").read_text())
    import nbformat

    nb = nbformat.from_dict(nb)
    nb.cells[0].metadata["rlm"]["step"] = -1
    with pytest.raises(RLMError, match="trajectory schema"):
        write_notebook(nb, tmp_path / "bad.ipynb")
    assert not (tmp_path / "bad.ipynb").exists()


def newer(tmp_path: Path) -> Path:
    nb = json.loads((FILES / "finished.ipynb").read_text())
    nb["metadata"]["rlm"].update(format=schema.FORMAT + 1, version="9.0.0")
    path = tmp_path / "future.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_a_notebook_of_a_newer_format_is_refused_in_one_sentence_naming_the_versions(tmp_path) -> None:
    path = newer(tmp_path)
    done = run_cli([*run_args("http://127.0.0.1:9/v1", tmp_path / "out.ipynb"), "--resume", str(path)], tmp_path)
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()[-1]
    assert "rlm-kernel 9.0.0" in said and f"format {schema.FORMAT + 1}" in said and "upgrade rlm-kernel" in said
    assert "Traceback" not in done.stderr
    exported = run_cli(["export", str(path), "--format", "markdown"], tmp_path)
    assert exported.returncode != 0 and "upgrade rlm-kernel" in exported.stderr and "Traceback" not in exported.stderr


def test_a_notebook_written_before_the_format_was_versioned_still_reads(tmp_path) -> None:
    from rlm_kernel.resume import read_notebook

    nb = json.loads((FILES / "finished.ipynb").read_text())
    nb["metadata"]["rlm"].pop("format", None)
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(nb))
    assert read_notebook(str(path)).metadata["rlm"]["runs"]
