"""``--router FILE``: root and sub-calls through litellm's Router, over two
scripted servers serving one sub-model name as two deployments. The ledger
and the sub-call records say which deployment answered; a failing
deployment is retried elsewhere and cooled down by the Router."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import nbformat
import pytest
from _helpers import repl

from rlm_kernel import RLM
from rlm_kernel.errors import ModelError
from rlm_kernel.testing.server import Reply, ScriptedServer

BATCH = "answers = llm_query_batched([f'item {i}' for i in range(40)], model='sub')\nprint(len(answers))"
ASK_THREE = "print(llm_query_batched(['one', 'two', 'three'], model='sub'))"


def router_file(tmp_path: Path, root: ScriptedServer, dep_a: ScriptedServer, dep_b: ScriptedServer,
                settings: str = "") -> str:
    path = tmp_path / "router.yaml"
    path.write_text(f"""\
model_list:
  - model_name: root
    litellm_params: {{model: openai/root-model, api_base: "{root.url}", api_key: "x"}}
    model_info: {{id: root-dep}}
  - model_name: sub
    litellm_params: {{model: openai/sub-model, api_base: "{dep_a.url}", api_key: "x"}}
    model_info: {{id: dep-a}}
  - model_name: sub
    litellm_params: {{model: openai/sub-model, api_base: "{dep_b.url}", api_key: "x"}}
    model_info: {{id: dep-b}}
router_settings:
  routing_strategy: simple-shuffle
{settings}""", encoding="utf-8")
    return str(path)


def subcall_records(nb: nbformat.NotebookNode) -> list[dict]:
    return [s for c in nb.cells for s in c.metadata.get("rlm", {}).get("subcalls", [])]


def test_a_batch_reaches_both_deployments_and_each_call_is_counted_once(server, tmp_path):
    root = server(root=[repl(BATCH), "FINAL(done)"])
    dep_a, dep_b = server(), server()
    out = tmp_path / "run.ipynb"
    rlm = RLM(model="root", sub_model="sub", router=router_file(tmp_path, root, dep_a, dep_b))
    result = rlm.completion("some context", "Label every item.", output=str(out))
    assert result.reason == "final", result.error

    served = {"dep-a": dep_a.answered("sub-model")["calls"], "dep-b": dep_b.answered("sub-model")["calls"]}
    assert sum(served.values()) == 40 and min(served.values()) > 0, served
    usage = result.usage["sub"]
    assert usage["calls"] == 40
    assert {k: v["calls"] for k, v in usage["deployments"].items()} == served
    assert usage["deployments"]["dep-a"]["api_base"] == dep_a.url
    assert result.usage["root"]["deployments"]["root-dep"]["calls"] == 2

    nb = nbformat.read(out, as_version=4)
    records = subcall_records(nb)
    assert len(records) == 40 and all(r["status"] == "done" for r in records)
    assert Counter(r["deployment"]["id"] for r in records) == Counter(served)
    assert {r["deployment"]["api_base"] for r in records} == {dep_a.url, dep_b.url}
    roots = [c.metadata["rlm"]["root_call"] for c in nb.cells if "root_call" in c.metadata.get("rlm", {})]
    assert roots and all(r["deployment"] == {"id": "root-dep", "api_base": root.url} for r in roots)
    assert result.to_json()["usage"]["sub"]["deployments"] == usage["deployments"]


def test_a_failing_deployment_is_cooled_down_while_the_other_finishes(server, tmp_path):
    seen_before_second_batch: list[int] = []
    dep_b = server(lambda body: Reply(status=500, text="this deployment is down"))

    def second_batch(body: dict) -> str:
        seen_before_second_batch.append(len(dep_b.requests))
        return repl(BATCH)

    root = server(root=[repl(BATCH), second_batch, "FINAL(done)"])
    dep_a = server()
    config = router_file(tmp_path, root, dep_a, dep_b, "  allowed_fails: 1\n  cooldown_time: 120\n")
    rlm = RLM(model="root", sub_model="sub", router=config)
    result = rlm.completion("some context", "Label every item twice.", output=str(tmp_path / "run.ipynb"))
    assert result.reason == "final", result.error

    # every one of the 80 sub-calls answered once, all by the healthy deployment
    assert dep_a.answered("sub-model")["calls"] == 80
    assert dep_b.answered()["calls"] == 0 and dep_b.requests, "the failing deployment was never tried"
    assert result.usage["sub"]["calls"] == 80
    assert {k: v["calls"] for k, v in result.usage["sub"]["deployments"].items()} == {"dep-a": 80}
    records = subcall_records(nbformat.read(tmp_path / "run.ipynb", as_version=4))
    assert len(records) == 80 and all(r["status"] == "done" for r in records)
    assert any(r.get("attempts", 1) > 1 for r in records[:40])  # retried on the other deployment

    # once cooled down, the failing deployment got none of the second batch
    assert len(dep_b.requests) == seen_before_second_batch[0]
    from litellm.router_utils.cooldown_handlers import get_cooldown_deployments

    assert "dep-b" in get_cooldown_deployments(rlm.client.router(), None)


def test_the_router_retries_and_ours_do_not(server, tmp_path):
    """One deployment that always fails: the Router's num_retries decides how
    often it is asked (here 2 retries: 3 requests); our loop adds none."""
    root = server(root=[repl("print(llm_query('x', model='sub'))"), "FINAL(done)"])
    down = server(lambda body: Reply(status=503, text="down"))
    path = tmp_path / "router.yaml"
    path.write_text(f"""\
model_list:
  - {{model_name: root, litellm_params: {{model: openai/root-model, api_base: "{root.url}", api_key: x}}}}
  - {{model_name: sub, litellm_params: {{model: openai/sub-model, api_base: "{down.url}", api_key: x}}}}
router_settings: {{num_retries: 2, retry_after: 0, disable_cooldowns: true}}
""", encoding="utf-8")
    result = RLM(model="root", sub_model="sub", router=str(path), max_retries=9).completion("c", "q?")
    assert result.reason == "final"
    assert len(down.requests) == 3


@pytest.mark.parametrize("text, message", [
    (None, "Cannot read the router config"),
    ("model_list: []\n", "needs a `model_list`"),
    ("model_list:\n  - {model_name: m}\n", "Deployment 1 of the router config"),
    ("model_list:\n  - {model_name: m, litellm_params: {model: openai/x}}\nrouters: {}\n", "unknown section 'routers'"),
    ("model_list: [\n", "not valid YAML or JSON"),
])
def test_a_bad_router_file_is_refused_in_one_sentence(tmp_path, text, message):
    path = tmp_path / "router.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelError, match=message):
        RLM(model="m", router=str(path))


def test_names_and_settings_the_router_does_not_take_are_refused_before_the_run(server, tmp_path):
    srv = server()
    path = tmp_path / "router.yaml"
    deployment = f"""\
model_list:
  - {{model_name: m, litellm_params: {{model: openai/root-model, api_base: "{srv.url}", api_key: x}}}}
"""
    path.write_text(deployment, encoding="utf-8")
    with pytest.raises(ModelError, match=r"no deployment named 'other'; its model names are m\.$"):
        RLM(model="m", sub_model="other", router=str(path)).completion("c", "q?")
    path.write_text(deployment + "router_settings: {num_retriez: 1}\n", encoding="utf-8")
    with pytest.raises(ModelError, match="router setting litellm's Router does not know: 'num_retriez'"):
        RLM(model="m", router=str(path)).completion("c", "q?")
    assert not srv.requests


def test_router_is_written_in_the_query_cell_and_read_back():
    from rlm_kernel.engine.runs.options import parse_query_cell, query_cell_source, resolve

    options = resolve({"model": "root", "router": "cfg.yaml"})
    source = query_cell_source(options, "q?")
    assert "--router cfg.yaml" in source
    assert parse_query_cell(source)[1]["router"] == "cfg.yaml"
    assert resolve({}, environ={"RLM_ROUTER": "r.yaml"}).router == "r.yaml"


def test_after_a_router_run_an_unpriced_model_still_has_an_unknown_price(server, tmp_path):
    """The Router registers its deployments in litellm at a price of 0 for the
    whole process; a later plain run of the same model names must not read
    that as free."""
    root = server(root=[repl(BATCH), "FINAL(done)"])
    routed = RLM(model="root", sub_model="sub", router=router_file(tmp_path, root, server(), server()))
    assert routed.completion("some context", "Label every item.").cost_usd is None
    plain = server(root=[repl("x = llm_query('one')"), "FINAL(done)"])
    result = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=plain.url).completion(
        "some context", "Ask once.")
    assert result.reason == "final"
    assert result.cost_usd is None
    assert all(u["cost_usd"] is None for u in result.usage.values()), result.usage



def cooling_router(tmp_path: Path, server) -> tuple[Path, ScriptedServer, ScriptedServer]:
    """A router file whose sub-model has a deployment that is down and weighted
    to be picked first (the first failure cools it down for 10 minutes) and a
    healthy one; the root model takes one step of three sub-calls, then answers."""
    def root(body: dict) -> str:
        return repl(ASK_THREE) if len(body["messages"]) <= 2 else "FINAL(done)"

    root_server = server(root)
    down = server(lambda body: Reply(status=500, text="this deployment is down"))
    healthy = server()
    path = tmp_path / "router.yaml"
    path.write_text(f"""\
model_list:
  - {{model_name: root, litellm_params: {{model: openai/root-model, api_base: "{root_server.url}", api_key: x}}}}
  - {{model_name: sub, litellm_params: {{model: openai/sub-model, api_base: "{down.url}", api_key: x, weight: 1000}},
     model_info: {{id: dep-down}}}}
  - {{model_name: sub, litellm_params: {{model: openai/sub-model, api_base: "{healthy.url}", api_key: x, weight: 1}},
     model_info: {{id: dep-up}}}}
router_settings: {{allowed_fails: 0, cooldown_time: 600, num_retries: 2, retry_after: 0}}
""", encoding="utf-8")
    return path, down, healthy


@pytest.mark.kernel
def test_in_one_kernel_a_deployment_cooled_down_by_one_run_is_avoided_by_the_next(server, tmp_path):
    """The kernel keeps one Router per router file, so its cooldowns carry
    over from one %%rlm cell to the next: the first run's sub-calls cool the
    down deployment (and are retried on the other); the second run's all go
    to the healthy one."""
    from _kernel import Kernel

    path, down, healthy = cooling_router(tmp_path, server)
    kernel = Kernel("rlm", tmp_path)
    try:
        kernel.import_litellm()
        reply, _ = kernel.execute("context = 'some context'")
        assert reply["status"] == "ok"
        for number in (1, 2):
            before = len(down.requests)
            reply, _ = kernel.execute(f"%%rlm --router {path} --model root --sub-model sub\nQuestion {number}?",
                                      timeout=120)
            assert reply["status"] == "ok", reply
            assert kernel.value("rlm_result.reason") == "'final'"
            assert kernel.value("sorted(rlm_result.usage['sub']['deployments'])") == "['dep-up']"
            if number == 1:
                assert len(down.requests) > before, "the down deployment was never tried"
            else:
                assert len(down.requests) == before, "the second run asked the cooled-down deployment again"
        assert healthy.answered("sub-model")["calls"] == 6
    finally:
        kernel.shutdown()


def test_a_batch_worker_keeps_one_router_for_its_tasks(server, tmp_path):
    from rlm_kernel.batch.workers import run_task

    path, down, healthy = cooling_router(tmp_path, server)
    for number in (1, 2):
        before = len(down.requests)
        line = run_task({"id": f"t{number}", "query": f"Question {number}?", "paths": None, "context_text": "c"},
                        {"model": "root", "sub_model": "sub", "router": str(path)}, str(tmp_path / f"t{number}.ipynb"))
        assert line["reason"] == "final", line
        assert sorted(line["usage"]["sub"]["deployments"]) == ["dep-up"]
        assert (len(down.requests) > before) if number == 1 else (len(down.requests) == before)
    assert healthy.answered("sub-model")["calls"] == 6


def test_model_clients_keep_one_router_per_file_text_and_settings(tmp_path):
    from rlm_kernel.builder import ModelClients
    from rlm_kernel.engine.runs.options import resolve

    path = tmp_path / "router.yaml"
    path.write_text("model_list:\n  - {model_name: m, litellm_params: {model: openai/x}}\n", encoding="utf-8")
    clients = ModelClients()
    first = clients.get(resolve({"model": "m", "router": str(path)}))
    assert clients.get(resolve({"model": "m", "router": str(path), "max_iterations": 3})) is first
    assert clients.get(resolve({"model": "m", "router": str(path), "max_retries": 1})) is not first
    path.write_text(path.read_text() + "router_settings: {num_retries: 1}\n", encoding="utf-8")
    edited = clients.get(resolve({"model": "m", "router": str(path)}))
    assert edited is not first and edited.config["router_settings"] == {"num_retries": 1}
    plain = resolve({"model": "m"})
    assert clients.get(plain) is not clients.get(plain)  # nothing to keep without a Router
