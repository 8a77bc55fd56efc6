"""Vision: the images an agent cell displays reach the root model in the next
step's message as image parts (``--vision auto|on|off``, at most
``--max-images-per-step``, downscaled to 1,024 px), and sub-calls take images
(``llm_query(prompt, images=[...])``, ``(text, images)`` pairs in a batch),
stored once per cell by hash, their hashes part of the call's identity.
The scripted server reads every image part it receives and refuses bad ones
(testing/vision.py), as a provider would."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from typing import Any

import nbformat
import pytest
from _helpers import ROOT, SUB, cells_by_role, clean_env, repl

from rlm_kernel import RLM
from rlm_kernel.engine.model.caching import with_breakpoints
from rlm_kernel.engine.protocol import images as images_mod
from rlm_kernel.engine.runs.compaction import count_tokens, upper_bound
from rlm_kernel.engine.runs.history import rebuild
from rlm_kernel.engine.trajectory.records import SubcallRecord, prompt_hash
from rlm_kernel.engine.trajectory.replay import ReplayCursor
from rlm_kernel.testing.server import Script, ScriptedServer, prompt_text

PIL = pytest.importorskip("PIL.Image")

# Generated code that displays a 2048x1024 PNG through IPython.display.Image.
SHOW_BIG = """
import io
from PIL import Image as _P
from IPython.display import Image, display
_buf = io.BytesIO(); _P.new("RGB", (2048, 1024), "red").save(_buf, "PNG")
display(Image(data=_buf.getvalue()))
print("shown")
"""


def png(width: int, height: int, colour: str = "blue") -> bytes:
    out = io.BytesIO()
    PIL.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def content_of(body: dict[str, Any]) -> Any:
    return body["messages"][-1]["content"]


def run(srv: ScriptedServer, tmp_path: Any = None, **kwargs: Any) -> Any:
    kwargs.setdefault("model", ROOT)
    kwargs.setdefault("sub_model", SUB)
    rlm = RLM(api_base=srv.url, retry_base_delay=0.01, **kwargs)
    out = tmp_path / "run.ipynb" if tmp_path is not None else None
    return rlm.completion("some context", "What is plotted?", output=out), out


# -- the root model sees its cells' images ----------------------------------------


def test_an_image_a_cell_displays_reaches_the_root_model_downscaled(tmp_path):
    with ScriptedServer(Script(root=[repl(SHOW_BIG), "FINAL(red)"]), max_images=4) as srv:
        result, out = run(srv, tmp_path, vision="on")
    assert result.reason == "final", result
    assert [(i.model, i.mime, i.width, i.height) for i in srv.images] == [("root-model", "image/png", 1024, 512)]
    parts = content_of(srv.calls("root-model")[1])
    assert isinstance(parts, list) and parts[0]["type"] == "text"
    assert "Cell [1] output" in parts[0]["text"] and "shown" in parts[0]["text"]
    assert "Cell [1] displayed 1 image: image 1 below." in parts[0]["text"]
    assert parts[1] == {"type": "text", "text": "Image 1 (Cell [1], 1024x512):"}
    assert parts[2]["type"] == "image_url" and parts[2]["image_url"]["url"].startswith("data:image/png;base64,")
    # the first message told it so
    first = srv.calls("root-model")[0]["messages"][1]["content"]
    assert "Images: what your code displays" in first and "at most 4 images a step" in first
    assert first.index("Images: what your code displays") < first.index("What is plotted?")
    # the notebook keeps the cell's own output, at its size
    nb = nbformat.read(out, as_version=4)
    shown = [o for o in cells_by_role(nb, "code")[0].outputs if "image/png" in o.get("data", {})]
    assert len(shown) == 1 and PIL.open(io.BytesIO(base64.b64decode(shown[0].data["image/png"]))).size == (2048, 1024)
    # a history rebuilt from the notebook (--resume, continue from here) names the image, as text
    rebuilt = rebuild(nb.cells, len(nb.cells) - 1, "some context").messages
    assert all(isinstance(m["content"], str) for m in rebuilt)
    assert "Cell [1] displayed 1 image (not sent again in a history rebuilt from the notebook)." in rebuilt[-3]["content"]


def test_at_most_max_images_per_step_and_the_rest_counted():
    code = """
import io
from PIL import Image as _P
from IPython.display import Image, display
for colour in ["red", "green", "blue", "white", "black", "gray"]:
    _buf = io.BytesIO(); _P.new("RGB", (40, 30), colour).save(_buf, "PNG")
    display(Image(data=_buf.getvalue()))
"""
    with ScriptedServer(Script(root=[repl(code), "FINAL(six)"]), max_images=3) as srv:
        result, _ = run(srv, vision="on", max_images_per_step=3)
    assert result.reason == "final", result
    assert len(srv.images) == 3 and {(i.width, i.height) for i in srv.images} == {(40, 30)}
    text = content_of(srv.calls("root-model")[1])[0]["text"]
    assert ("Cell [1] displayed 6 images: image 1, image 2, image 3 below; 3 left out "
            "(at most 3 per step, --max-images-per-step).") in text
    assert "(3 more images displayed in this step were left out.)" in text


def test_a_matplotlib_figure_reaches_the_root_model():
    code = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.bar(["a", "b"], [1, 3])
display(fig)
"""
    with ScriptedServer(Script(root=[repl(code), "FINAL(b)"])) as srv:
        result, _ = run(srv, vision="on")
    assert result.reason == "final", result
    assert len(srv.images) == 1 and srv.images[0].mime == "image/png", srv.images


@pytest.mark.parametrize("vision, why", [
    ("auto", "litellm's model info does not say openai/root-model supports vision (--vision on sends them anyway)"),
    ("off", "--vision is off"),
])
def test_a_root_model_without_vision_gets_one_line_instead(vision, why):
    # the server refuses images to root-model: a run that sent any would fail
    with ScriptedServer(Script(root=[repl(SHOW_BIG), "FINAL(red)"]), blind_models=("root-model",)) as srv:
        result, _ = run(srv, vision=vision)
    assert result.reason == "final", result
    assert srv.images == []
    feedback = content_of(srv.calls("root-model")[1])
    assert isinstance(feedback, str)
    assert "Images: what your code displays" not in srv.calls("root-model")[0]["messages"][1]["content"]
    assert f"Cell [1] displayed 1 image, not shown to you: {why}." in feedback


def test_auto_follows_litellms_model_info_for_a_vision_model():
    # openai/gpt-4o is a vision model per litellm's model map; the scripted server answers for it
    with ScriptedServer(Script(root=[repl(SHOW_BIG), "FINAL(red)"], root_models=("gpt-4o",)),
                        blind_models=("root-model",)) as srv:
        result, _ = run(srv, model="openai/gpt-4o")
    assert result.reason == "final", result
    assert [(i.model, i.width) for i in srv.images] == [("gpt-4o", 1024)]


def test_the_server_refuses_bad_image_parts():
    from rlm_kernel.testing import vision

    tiny = base64.b64encode(png(4, 4)).decode()
    big = base64.b64encode(png(1100, 10)).decode()

    def body(*urls: str, model: str = "m") -> dict[str, Any]:
        return {"model": model, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "x"}, *({"type": "image_url", "image_url": {"url": u}} for u in urls)]}]}

    ok, problem = vision.read(body(f"data:image/png;base64,{tiny}"), 1024, 4, ())
    assert problem is None and [(i.mime, i.width) for i in ok] == [("image/png", 4)]
    assert "over the 1024 px limit" in vision.read(body(f"data:image/png;base64,{big}"), 1024, 4, ())[1]
    assert "at most 1 are allowed" in vision.read(body(*[f"data:image/png;base64,{tiny}"] * 2), 1024, 1, ())[1]
    assert "not a base64 data URL" in vision.read(body("https://example.com/a.png"), 1024, 4, ())[1]
    assert "says image/jpeg but holds image/png" in vision.read(body(f"data:image/jpeg;base64,{tiny}"), 1024, 4, ())[1]
    assert "does not take images" in vision.read(body(f"data:image/png;base64,{tiny}", model="blind"), 1024, 4,
                                                  ("blind",))[1]


# -- sub-calls take images --------------------------------------------------------


SUBCALL_IMAGES = """
import io, base64
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image as _P
fig, ax = plt.subplots(figsize=(3, 2)); ax.plot([1, 2, 3])
pil = _P.new("RGB", (3000, 1500), "green")
_buf = io.BytesIO(); _P.new("RGB", (20, 10), "blue").save(_buf, "PNG"); raw = _buf.getvalue()
_P.new("RGB", (30, 30), "red").save("red.png")
url = "data:image/png;base64," + base64.b64encode(raw).decode()
one = llm_query("describe", images=[fig, pil, raw, "red.png", url])
many = llm_query_batched([("first", [raw]), ("second", [raw, "red.png"]), "third"])
print(one, many)
"""


def test_sub_calls_send_images_stored_once_per_cell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def sub(prompt: str) -> str:
        return f"saw {prompt}"

    with ScriptedServer(Script(root=[repl(SUBCALL_IMAGES), "FINAL(done)"], sub=sub), max_images=5) as srv:
        result, out = run(srv, tmp_path)
    assert result.reason == "final", result
    subs = [i for i in srv.images if i.model == "sub-model"]
    assert len(subs) == 5 + 1 + 2
    assert (subs[1].width, subs[1].height) == (1024, 512)  # the 3000x1500 PIL image, downscaled
    assert {(i.width, i.height) for i in subs[2:5]} == {(20, 10), (30, 30)}
    one = next(b for b in srv.calls("sub-model") if prompt_text(b) == "describe")
    kinds = [p["type"] for p in one["messages"][0]["content"]]
    assert kinds == ["text"] + ["image_url"] * 5
    third = next(b for b in srv.calls("sub-model") if prompt_text(b) == "third")
    assert third["messages"][0]["content"] == "third"  # no images: a plain prompt
    nb = nbformat.read(out, as_version=4)
    cell = cells_by_role(nb, "code")[0]
    records = cell.metadata.rlm.subcalls
    stored = cell.metadata.rlm.images
    # raw and url are the same picture: one hash; each image kept once for the cell's 4 calls
    assert len(records[0]["images"]) == 5 and len(set(records[0]["images"])) == 4
    assert set(stored) == {h for r in records for h in r.get("images", [])} and len(stored) == 4
    assert all(v.startswith("data:image/png;base64,") for v in stored.values())
    assert "images" not in records[3]
    assert records[1]["images"][0] == records[2]["images"][0] == records[0]["images"][2]
    assert records[1]["prompt_hash"] != prompt_hash(SUB, "first")  # the images are part of the identity


def test_a_bad_image_is_refused_in_one_sentence():
    code = 'llm_query("describe", images=[42])'
    with ScriptedServer(Script(root=[repl(code), "FINAL(done)"])) as srv:
        result, _ = run(srv)
    feedback = prompt_text(srv.calls("root-model")[1])
    assert ("An image must be a matplotlib figure, a PIL image, PNG/JPEG bytes, a file path or a data URL, "
            "not int.") in feedback
    assert srv.calls("sub-model") == []


def test_replay_matches_the_prompt_and_its_images():
    red, blue = images_mod.from_bytes(png(8, 8, "red")), images_mod.from_bytes(png(8, 8, "blue"))
    record = SubcallRecord(id="1", kind="llm", model=SUB, prompt="describe", images=[red], status="done",
                           response="a red square")
    meta = record.as_metadata()
    assert meta["images"] == [red.hash]
    assert ReplayCursor([meta], enabled=True).take(SUB, "describe", [blue]) is None
    assert ReplayCursor([meta], enabled=True).take(SUB, "describe", []) is None
    assert ReplayCursor([meta], enabled=True).take(SUB, "describe", [red])["response"] == "a red square"
    # pinned: held without replay too, and only for the same images
    pinned = {**meta, "pinned": True, "response": "pinned answer"}
    assert ReplayCursor([pinned], enabled=False).take(SUB, "describe", [red])["response"] == "pinned answer"
    assert ReplayCursor([pinned], enabled=False).take(SUB, "describe", [blue]) is None


def test_a_resumed_run_replays_sub_calls_with_images(tmp_path, monkeypatch):
    """The follow-up re-runs the cells: the sub-call with the same image is
    replayed from the notebook (no model call), and the rebuilt history
    names the cell's images without sending them again."""
    monkeypatch.chdir(tmp_path)
    code = SHOW_BIG + '\nfrom PIL import Image as _Q\nseen = llm_query("describe", images=[_Q.new("RGB", (9, 9))])'
    with ScriptedServer(Script(root=[repl(code), "FINAL(done)", "FINAL(again)"])) as srv:
        rlm = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01, vision="on")
        first = rlm.completion("ctx", "What is plotted?", output=tmp_path / "a.ipynb")
        assert first.reason == "final" and len(srv.calls("sub-model")) == 1
        second = rlm.completion("ctx", "And then?", follow_up=tmp_path / "a.ipynb", output=tmp_path / "b.ipynb")
    assert second.reason == "final" and second.answer == "again", second
    assert len(srv.calls("sub-model")) == 1  # replayed
    assert second.replayed_subcalls == 1


# -- image parts in a history: counting, caching ------------------------------------


def test_image_parts_do_not_break_counting_or_cache_breakpoints():
    image = images_mod.from_bytes(png(512, 512))
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "```repl\nshow()\n```"},
                {"role": "user", "content": [{"type": "text", "text": "Cell [1] displayed 1 image"}, image.part()]}]
    assert upper_bound(messages) > 3000
    import asyncio

    counted = asyncio.run(count_tokens("openai/gpt-4o", messages))
    assert 0 < counted < upper_bound(messages)
    marked = with_breakpoints("anthropic/claude-sonnet-4-5", messages)
    assert marked[3]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked[3]["content"][-1]["type"] == "image_url"
    assert messages[3]["content"][-1].get("cache_control") is None  # the run's own history is left plain


def test_without_pillow_an_image_is_refused_in_one_sentence():
    code = ("import sys; sys.modules['PIL'] = None\n"
            "from rlm_kernel.engine.protocol.images import load, ImageError\n"
            "try:\n    load(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(20))\nexcept ImageError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.stdout.strip() == images_mod.NO_PILLOW, done.stderr


# -- the sub-call view --------------------------------------------------------------


def test_the_sub_call_view_shows_thumbnails_and_counts_images():
    from rlm_kernel.widgets.subcall import SubcallView, record_html

    image = images_mod.from_bytes(png(300, 200))
    record = SubcallRecord(id="1", kind="llm", model=SUB, prompt="describe", images=[image, image], status="done",
                           response="two blue boxes")
    shown = record_html(record)
    assert shown.count("<img class='rlm-sc-thumb' src='data:image/png;base64,") == 2
    assert "<b>Images</b> (2)" in shown and "[2 images] describe" in shown
    thumb = PIL.open(io.BytesIO(base64.b64decode(shown.split("base64,", 1)[1].split("'", 1)[0])))
    assert max(thumb.size) == 96
    assert "| [2 images] describe |" in SubcallView([record], "llm", widgets=False).markdown()


# -- a person's cell in the kernel: images recorded once, pins hold for the same images -----------


def _click(kernel: Any, comm_id: str) -> list[dict]:
    msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom",
                                                                           "content": {"event": "click"}}})
    kernel.kc.shell_channel.send(msg)
    return kernel.execute("pass")[1]


def _widget_states(messages: list[dict]) -> dict[str, dict[str, Any]]:
    return {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in messages
            if m["msg_type"] == "comm_open" and m["content"].get("target_name") == "jupyter.widget"}


@pytest.mark.kernel
def test_a_person_cells_images_are_recorded_once_and_a_pin_holds_for_the_same_images(tmp_path):
    from _kernel import Frontend, texts

    frontend = Frontend(tmp_path)
    try:
        frontend.import_litellm()
        with ScriptedServer(Script(sub=lambda prompt: f"sub saw {prompt}")) as server:
            frontend.hello([])
            frontend.execute(
                f"import os; os.environ.update(RLM_MODEL='openai/root-model', RLM_SUB_MODEL='openai/sub-model', "
                f"RLM_API_BASE='{server.url}', OPENAI_API_KEY='sk-test-not-a-key')")
            frontend.execute("from PIL import Image as P\nred, blue = P.new('RGB', (50, 40), 'red'), "
                             "P.new('RGB', (50, 40), 'blue')")
            code = "r = llm_query_batched([('which colour?', [{0}]), ('and this?', [{0}, {0}])])\nprint('got', r)"
            reply, messages = frontend.run_cell(code.format("red"), "p1")
            assert reply["status"] == "ok", reply
            assert len(server.images) == 3
            recorded = frontend.ops_named("cell_metadata")[-1]
            records, stored = recorded["rlm"]["subcalls"], recorded["rlm"]["images"]
            assert len(stored) == 1 and records[0]["images"] == [*stored] and records[1]["images"] == [*stored] * 2
            # pin the first call's response from its widget (a batch row's edit opens the editor)
            [batch] = [cid for cid, s in _widget_states(messages).items() if s.get("_model_name") == "SubcallListModel"]
            edit = frontend.kc.session.msg("comm_msg", {"comm_id": batch, "data": {
                "method": "custom", "content": {"type": "edit", "index": 0}}})
            frontend.kc.shell_channel.send(edit)
            _, opened = frontend.execute("pass")
            shown = _widget_states(opened)
            [text] = [cid for cid, s in shown.items() if "rlm-sc-edit-text" in (s.get("_dom_classes") or [])]
            [pin] = [cid for cid, s in shown.items() if s.get("description") == "Pin response"]
            frontend.kc.shell_channel.send(frontend.kc.session.msg("comm_msg", {"comm_id": text, "data": {
                "method": "update", "state": {"value": "RED (pinned)"}, "buffer_paths": []}}))
            frontend.execute("pass")
            _click(frontend, pin)
            assert frontend.ops_named("cell_metadata")[-1]["rlm"]["subcalls"][0]["pinned"] is True
            frontend.execute("%rlm replay off")
            _, messages = frontend.run_cell(code.format("red"), "p1")
            assert "got ['RED (pinned)', 'sub saw and this?']" in texts(messages, "stream")
            assert len(server.calls("sub-model")) == 3  # the pin answered; replay off: the other call is fresh
            _, messages = frontend.run_cell(code.format("blue"), "p1")
            assert "got ['sub saw which colour?', 'sub saw and this?']" in texts(messages, "stream")
            assert len(server.calls("sub-model")) == 5  # another image: the pin does not hold
    finally:
        frontend.shutdown()


def test_a_resumed_run_shows_a_vision_root_model_the_earlier_images_again(tmp_path):
    (tmp_path / "ctx.txt").write_text("sales figures", encoding="utf-8")
    with ScriptedServer(Script(root=[repl(SHOW_BIG), "FINAL(red)", "FINAL(again)", "FINAL(blind)"]),
                        max_images=1) as srv:
        rlm = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01, vision="on")
        rlm.completion("sales figures", "What is plotted?", output=tmp_path / "a.ipynb")
        nb = nbformat.read(tmp_path / "a.ipynb", as_version=4)
        step1 = max(i for i, c in enumerate(nb.cells) if c.metadata.get("rlm", {}).get("step") == 1)
        given = [str(tmp_path / "ctx.txt")]
        again = rlm.resume(tmp_path / "a.ipynb", from_cell=step1, output=tmp_path / "b.ipynb", context=given)
        assert again.reason == "final" and again.answer == "again", again
        resumed = srv.calls("root-model")[2]["messages"]
        [feedback] = [m for m in resumed if isinstance(m["content"], list)]
        assert "Cell [1] displayed 1 image: image 1 below." in feedback["content"][0]["text"]
        assert feedback["content"][-1]["type"] == "image_url"
        assert [(i.width, i.height) for i in srv.images][-1] == (1024, 512)
        # a root model that takes no images is told of them in a line
        blind = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01, vision="off")
        blind.resume(tmp_path / "a.ipynb", from_cell=step1, output=tmp_path / "c.ipynb", context=given)
        text = [m["content"] for m in srv.calls("root-model")[3]["messages"]]
        assert all(isinstance(t, str) for t in text)
        assert any("Cell [1] displayed 1 image (not sent again in a history rebuilt from the notebook)." in t
                   for t in text)


def test_a_long_history_sheds_its_oldest_images():
    from rlm_kernel.engine.steps.vision import MAX_HISTORY_IMAGES, shed_old_images

    part = images_mod.from_bytes(png(4, 4)).part()
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    for step in range(MAX_HISTORY_IMAGES // 2):
        messages += [{"role": "assistant", "content": f"step {step}"},
                     {"role": "user", "content": [{"type": "text", "text": f"feedback {step}"}, part, part]}]
    assert shed_old_images(messages) == 0  # 32: all kept
    messages += [{"role": "assistant", "content": "one more"},
                 {"role": "user", "content": [{"type": "text", "text": "feedback"}, part]}]
    before = [dict(m) for m in messages]
    assert shed_old_images(messages) == 17  # 33: the newest 16 kept
    kinds = [p["type"] for m in messages if isinstance(m["content"], list) for p in m["content"][1:]]
    assert kinds == ["text"] * 17 + ["image_url"] * 16
    assert "no longer sent" in messages[3]["content"][1]["text"]
    assert before[3]["content"][1]["type"] == "image_url"  # a new list: a message kept elsewhere is not changed
    assert shed_old_images(messages) == 0  # then nothing until the history holds 33 again


def test_a_background_sub_call_takes_images_and_its_cell_keeps_them(tmp_path):
    code = """
from PIL import Image as _P
job = llm_query("describe", images=[_P.new("RGB", (30, 20), "red")], wait=False)
"""
    with ScriptedServer(Script(root=[repl(code), repl("print(job.result())"), "FINAL(done)"],
                               sub=lambda prompt: f"saw {prompt}")) as srv:
        rlm = RLM(model=ROOT, sub_model=SUB, api_base=srv.url, retry_base_delay=0.01)
        result = rlm.completion("ctx", "q", output=tmp_path / "bg.ipynb")
        assert result.reason == "final", result
    assert [(i.model, i.width) for i in srv.images] == [("sub-model", 30)]
    assert "saw describe" in prompt_text(srv.calls("root-model")[2])
    started = cells_by_role(nbformat.read(tmp_path / "bg.ipynb", as_version=4), "code")[0].metadata.rlm
    assert started.subcalls[0]["images"] == [*started.images] and len(started.images) == 1


@pytest.mark.kernel
def test_in_the_kernel_plots_reach_the_root_model_whether_shown_or_left_at_the_cells_end(kernel):
    """matplotlib's inline backend: plt.show() in a cell, and a figure left
    open at the cell's end (drawn after the code, by the backend), both
    reach the root model as the next step's images."""
    from _kernel import texts

    shown = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    left_open = "plt.bar(['a', 'b'], [2, 5])"
    kernel.execute("context = 'numbers to plot'")
    with ScriptedServer(Script(root=[repl(shown), repl(left_open), "FINAL(seen)"])) as srv:
        reply, messages = kernel.execute(f"%%rlm --vision on --model {ROOT} --api-base {srv.url}\nPlot it.",
                                         timeout=60)
        assert reply["status"] == "ok", texts(messages, "stream", "error")
        calls = srv.calls("root-model")
    step1, step2 = calls[1]["messages"][-1]["content"], calls[2]["messages"][-1]["content"]
    assert isinstance(step1, list) and "displayed 1 image: image 1 below." in step1[0]["text"], step1
    assert isinstance(step2, list) and "displayed 1 image: image 1 below." in step2[0]["text"], step2
    assert [part["type"] for part in step2].count("image_url") == 1
    assert kernel.value("rlm_result.answer") == "'seen'"
