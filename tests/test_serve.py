"""The RLM as an OpenAI-compatible model: ``rlm-kernel serve`` starts the
real litellm proxy on 127.0.0.1 and the ``openai`` client calls it; the
models behind it are a scripted server in this process. Also the provider
registered in-process (``litellm.completion(model="rlm/...")``) and how a
request becomes a run."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
import openai
import pytest
from _helpers import cell_text, cells_by_role, wait_for
from _serve import ANSWER, CLI, STEP, Served, responder

from rlm_kernel.engine.runs.options import resolve
from rlm_kernel.serve.request import BadRequest, read_request
from rlm_kernel.testing.server import all_text


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    served = Served(tmp_path_factory.mktemp("serve"))
    yield served
    served.stop()


MESSAGES = [{"role": "system", "content": "You read contracts."},
            {"role": "user", "content": "Contract A: the fee is 40."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What is the fee plus two?"}]


def test_a_request_runs_an_rlm_and_answers_with_its_totals(served):
    before = served.models.answered()
    reply = served.client.chat.completions.create(model="rlm", messages=MESSAGES)
    assert reply.choices[0].message.content == ANSWER
    assert reply.choices[0].finish_reason == "stop"
    spent = {k: served.models.answered()[k] - before[k] for k in before}
    assert spent["calls"] == 5  # two root steps, three sub-calls
    assert reply.usage.prompt_tokens == spent["prompt_tokens"]
    assert reply.usage.completion_tokens == spent["completion_tokens"]
    rlm = reply.model_extra["rlm"]
    assert rlm["reason"] == "final" and rlm["iterations"] == 2 and rlm["subcalls"] == 3
    assert rlm["run_id"] and rlm["error"] is None and "answer" not in rlm
    assert set(rlm["usage"]) == {"openai/root-model", "openai/sub-model"}

    # the trajectory notebook, like any other run's; the context is kept beside it
    path = Path(rlm["notebook"])
    assert path.parent == served.runs and path.suffix == ".ipynb"
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["rlm"]["runs"][0]["run_id"] == rlm["run_id"]
    assert cells_by_role(nb, "query")[0].source.endswith("What is the fee plus two?")
    assert "list 3" in cell_text(cells_by_role(nb, "code")[0])  # the three other messages
    sources = cells_by_role(nb, "context")[0].metadata["rlm"]["sources"]
    kept = sorted(Path(sources[0]).iterdir())
    assert [p.read_text(encoding="utf-8") for p in kept] == [m["content"] for m in MESSAGES[:3]]


def test_a_notebook_written_for_a_request_can_be_continued(served):
    from rlm_kernel import RLM

    reply = served.client.chat.completions.create(model="rlm", messages=MESSAGES[1:2] + MESSAGES[3:])
    notebook = reply.model_extra["rlm"]["notebook"]
    resumed = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=served.models.url).resume(
        notebook, from_cell=2, output=str(served.runs / "continued.ipynb"))
    assert resumed.reason == "final" and resumed.answer == ANSWER
    assert resumed.replayed_subcalls == 3 and resumed.subcalls == 0  # the step's sub-calls came from the notebook
    code = cells_by_role(nbformat.read(served.runs / "continued.ipynb", as_version=4), "code")
    assert "Document 26" in cell_text(code[0])  # one other message: the context is its text, reloaded from the file


def test_a_streamed_request_sends_progress_as_reasoning_then_the_answer(served):
    stream = served.client.chat.completions.create(model="rlm", messages=MESSAGES, stream=True,
                                                   stream_options={"include_usage": True})
    reasoning, content, finish, usage, rlm = [], [], None, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if (chunk.model_extra or {}).get("rlm"):
            rlm = chunk.model_extra["rlm"]
        for choice in chunk.choices:
            delta = choice.delta
            if (delta.model_extra or {}).get("reasoning_content"):
                assert not content, "progress after the answer"
                reasoning.append(delta.model_extra["reasoning_content"])
            if delta.content:
                content.append(delta.content)
            finish = choice.finish_reason or finish
    progress = "".join(reasoning)
    assert progress.startswith("RLM run on a context of 3 messages")
    assert "step 1: ok, 3 sub-calls: print(type(context).__name__, len(context))" in progress
    assert re.search(r"run \w+ ended \(final\) after 2 steps and 3 sub-calls", progress)
    assert "".join(content) == ANSWER and finish == "stop"
    assert rlm is not None and rlm["reason"] == "final" and Path(rlm["notebook"]).exists()
    assert usage is not None and usage.prompt_tokens == sum(u["prompt_tokens"] for u in rlm["usage"].values())


def test_a_streaming_client_that_goes_away_stops_its_run(served):
    before = set(served.runs.glob("*.ipynb"))
    stream = served.client.chat.completions.create(model="rlm", stream=True,
                                                   messages=[{"role": "user", "content": "SLOW please"}])
    first = next(iter(stream))
    assert first.choices[0].delta.model_extra["reasoning_content"].startswith("RLM run on a context of 0")
    stream.close()
    deadline = time.monotonic() + 20
    reasons: list[str] = []
    while time.monotonic() < deadline:
        reasons = [json.loads(p.read_text(encoding="utf-8"))["metadata"]["rlm"]["runs"][-1]["reason"]
                   for p in set(served.runs.glob("*.ipynb")) - before]
        if reasons == ["interrupted"]:
            break
        time.sleep(0.3)
    assert reasons == ["interrupted"]


def test_a_plain_request_whose_client_goes_away_stops_its_run(served):
    """Not streamed: nothing is written to the client until the run ends, so
    only the proxy can notice the hang-up (general_settings.cancel_on_disconnect)."""
    import http.client

    marker = f"PAUSE {uuid.uuid4().hex}"
    before = set(served.runs.glob("*.ipynb"))

    def root_calls() -> int:
        return sum(marker in all_text(body) for body in served.models.calls("root-model"))

    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    connection.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": "rlm", "messages": [{"role": "user", "content": marker}]}),
        headers={"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"})
    wait_for(lambda: root_calls() == 1, 60, "the run's first root call")
    time.sleep(1.0)  # its 8-second step is running
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    gone = time.monotonic()

    def reasons() -> list[str]:
        return [json.loads(p.read_text(encoding="utf-8"))["metadata"]["rlm"]["runs"][-1].get("reason", "")
                for p in set(served.runs.glob("*.ipynb")) - before]

    wait_for(lambda: reasons() == ["interrupted"], 20, "the run to end interrupted", poll=0.3)
    time.sleep(max(0.0, gone + 12 - time.monotonic()))  # past the step's end: a live run would ask again
    assert root_calls() == 1, "the run went on after its client went away"


@pytest.mark.parametrize("messages, extra, said", [
    ([], None, "The request has no messages"),
    ([{"role": "system", "content": "x"}], None, "no user message"),
    (MESSAGES, {"rlm": {"max_iteration": 3}}, "Unknown option 'max_iteration' in `rlm`"),
    (MESSAGES, {"rlm": {"api_base": "http://elsewhere"}}, "'api_base' is set by the server"),
    (MESSAGES, {"rlm": {"max_iterations": 50}}, "rlm.max_iterations 50 is above the server's limit of 10"),
    (MESSAGES, {"max_iterations": 3}, "Unknown request field 'max_iterations'; run options go in an `rlm` object"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_gets_an_openai_style_error(served, messages, extra, said, stream):
    before = len(served.models.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        result = served.client.chat.completions.create(model="rlm", messages=messages, extra_body=extra,
                                                       stream=stream)
        list(result)
    error = caught.value
    assert error.status_code == 400
    assert said in error.body["message"] and error.body["type"] == "invalid_request_error"
    assert len(served.models.requests) == before  # refused before any model call


def test_the_key_is_needed_and_written_nowhere(served):
    wrong = openai.OpenAI(base_url=served.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.APIStatusError):
        wrong.chat.completions.create(model="rlm", messages=MESSAGES)
    files = [p for folder in (served.tmp, served.runs) for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "proxy-config.yaml" for p in files)  # the serve command's own files are there
    for path in files:
        assert served.key not in path.read_text(encoding="utf-8", errors="replace"), path
    assert "".join(served.output).count(served.key) == 1


# -- the provider in this process -------------------------------------------------------


def test_registered_in_process_litellm_completion_runs_an_rlm(tmp_path, server):
    import litellm

    from rlm_kernel.serve import register

    models = server(responder)
    register(runs_dir=str(tmp_path), sub_model="openai/sub-model")
    messages = [{"role": "user", "content": "one document"}, {"role": "user", "content": "Sum it up."}]
    reply = litellm.completion(model="rlm/openai/root-model", api_base=models.url, messages=messages)
    assert reply.choices[0].message.content == ANSWER and reply.rlm["reason"] == "final"
    notebook = nbformat.read(reply.rlm["notebook"], as_version=4)
    assert "str 12" in cell_text(cells_by_role(notebook, "code")[0])
    chunks = list(litellm.completion(model="rlm/openai/root-model", api_base=models.url, messages=messages,
                                     stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    thought = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert text == ANSWER and "step 1: ok, 3 sub-calls" in thought
    with pytest.raises(litellm.BadRequestError, match="no user message"):
        litellm.completion(model="rlm/openai/root-model", api_base=models.url,
                           messages=[{"role": "assistant", "content": "hi"}])


# -- how a request becomes a run ------------------------------------------------------------


SERVER = resolve({"model": "m", "max_cost": 1.0})


def test_the_last_user_message_is_the_query_and_the_rest_the_context():
    read = read_request([{"role": "user", "content": "q"}], {}, SERVER)
    assert (read.query, read.context) == ("q", [])
    read = read_request([{"role": "user", "content": "doc"}, {"role": "user", "content": "q"}], {}, SERVER)
    assert (read.query, read.context) == ("q", "doc")
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "q"}, {"role": "assistant", "content": "later"}]
    assert read_request(messages, {}, SERVER).context == ["ab", "later"]
    with pytest.raises(BadRequest, match="has a 'image_url' part; the RLM reads text only"):
        read_request([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], {}, SERVER)


def test_a_request_may_only_tighten_the_servers_limits():
    params = {"temperature": 0.2, "max_tokens": 9, "stream": True, "rlm": {"max_cost": 0.5, "max_iterations": 4,
                                                                              "no_network_in_code": True}}
    read = read_request([{"role": "user", "content": "q"}], params, SERVER)
    assert read.options == {"max_cost": 0.5, "max_iterations": 4, "no_network_in_code": True}
    with pytest.raises(BadRequest, match="rlm.max_cost 2 is above the server's limit of 1"):
        read_request([{"role": "user", "content": "q"}], {"rlm": {"max_cost": 2}}, SERVER)
    guarded = resolve({"model": "m", "no_network_in_code": True})
    read = read_request([{"role": "user", "content": "q"}], {"rlm": {"no_network_in_code": False}}, guarded)
    assert read.options == {"no_network_in_code": True}
    read = read_request([{"role": "user", "content": "q"}], {"extra_body": {"rlm": {"max_subcalls": 10}}}, SERVER)
    assert read.options == {"max_subcalls": 10}


def test_the_proxy_config_serves_one_name_through_our_provider_and_never_retries_a_run():
    from rlm_kernel.serve.proxy import proxy_config

    config = proxy_config("my-rlm", "openai/gpt-4o-mini")
    assert config["model_list"] == [{"model_name": "my-rlm", "litellm_params": {"model": "rlm/openai/gpt-4o-mini"}}]
    assert config["litellm_settings"]["custom_provider_map"][0]["custom_handler"] == \
        "rlm_kernel.serve.provider.rlm_handler"
    assert config["router_settings"] == {"num_retries": 0}
    assert config["general_settings"] == {"cancel_on_disconnect": True}
    assert "master_key" not in json.dumps(config)


def test_serve_without_a_model_says_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    done = subprocess.run([CLI, "serve"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert "Give the root model to serve with --model" in done.stderr


def test_a_run_without_an_answer_says_why_and_a_failed_root_model_is_an_error(tmp_path, server):
    import litellm

    from rlm_kernel.serve import register
    from rlm_kernel.testing.server import Reply

    register(runs_dir=str(tmp_path), sub_model="openai/sub-model", max_iterations=1)
    messages = [{"role": "user", "content": "doc"}, {"role": "user", "content": "q?"}]
    looping = server(lambda body: STEP if body.get("model") == "root-model" else "sub")
    reply = litellm.completion(model="rlm/openai/root-model", api_base=looping.url, messages=messages)
    assert reply.choices[0].finish_reason == "length" and not reply.choices[0].message.content
    assert reply.rlm["reason"] == "max_iterations" and reply.rlm["iterations"] == 1

    refusing = server(lambda body: Reply(status=401, text="bad key"))
    with pytest.raises(litellm.BadGatewayError, match="The RLM run ended with an error: The root model call failed"):
        litellm.completion(model="rlm/openai/root-model", api_base=refusing.url, messages=messages)
