"""``rlm-kernel lab`` (and ``./dev lab``) picks the model its kernels use:
RLM_MODEL as set; with a provider key but no RLM_MODEL, a default model of
that provider (so the examples' ``%%rlm`` cells run without ``--model``);
with no key, the bundled offline model. ``lab_settings`` is what the lab
command hands JupyterLab, tested here without starting JupyterLab; one test
starts a real RLM kernel with that environment and runs ``%%rlm`` in it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from _helpers import clean_env, repl
from _kernel import Kernel, texts

from rlm_kernel.cli import LAB_DEFAULT_MODELS, lab_settings
from rlm_kernel.testing.server import Script, ScriptedServer

BASE = {"PATH": "/usr/bin", "HOME": "/tmp"}


def test_a_provider_key_without_rlm_model_gives_the_kernels_a_default_model():
    env, offline_model, notes = lab_settings({**BASE, "OPENAI_API_KEY": "sk-fake"})
    assert not offline_model
    assert env["RLM_MODEL"] == "openai/gpt-4o-mini" and env["OPENAI_API_KEY"] == "sk-fake"
    (note,) = notes
    assert "openai/gpt-4o-mini" in note and "OPENAI_API_KEY" in note and "RLM_MODEL" in note and "--model" in note
    # the same is said above each run of that model in the notebook
    assert "openai/gpt-4o-mini" in env["RLM_MODEL_NOTE"] and "RLM_MODEL" in env["RLM_MODEL_NOTE"]


@pytest.mark.parametrize("key, model", [("ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5"),
                                        ("GEMINI_API_KEY", "gemini/gemini-2.5-flash"),
                                        ("GOOGLE_API_KEY", "gemini/gemini-2.5-flash")])
def test_each_provider_gets_its_own_default(key, model):
    env, offline_model, _ = lab_settings({**BASE, key: "fake-key-value"})
    assert (env["RLM_MODEL"], offline_model) == (model, False)


def test_with_several_keys_the_first_provider_in_the_table_wins():
    env, _, notes = lab_settings({**BASE, "GEMINI_API_KEY": "g", "ANTHROPIC_API_KEY": "a"})
    assert env["RLM_MODEL"] == "anthropic/claude-haiku-4-5" and "ANTHROPIC_API_KEY" in notes[0]


def test_every_default_model_is_one_litellm_knows_and_prices():
    """Names from litellm's bundled price list (the version pinned here), so a
    run's cost is known and the name is not a guess."""
    spec = importlib.util.find_spec("litellm")
    assert spec and spec.origin
    prices = json.loads((Path(spec.origin).parent / "model_prices_and_context_window_backup.json").read_text())
    for key, model in LAB_DEFAULT_MODELS:
        provider, name = model.split("/", 1)
        entry = prices.get(model) or prices.get(name)
        assert entry, f"{model} (for {key}) is not in litellm's price list"
        assert entry["litellm_provider"] == provider and entry["mode"] == "chat", (model, entry)
        assert entry["input_cost_per_token"] > 0 and entry["output_cost_per_token"] > 0


def test_rlm_model_as_set_is_kept():
    environ = {**BASE, "RLM_MODEL": "anthropic/claude-sonnet-4-5", "OPENAI_API_KEY": "sk-fake"}
    assert lab_settings(environ) == (environ, False, [])


def test_no_key_means_the_offline_model_and_offline_wins_over_a_key():
    assert lab_settings(dict(BASE)) == (BASE, True, [])
    env, offline_model, _ = lab_settings({**BASE, "OPENAI_API_KEY": "sk-fake"}, offline=True)
    assert offline_model and "RLM_MODEL" not in env
    env, offline_model, _ = lab_settings({**BASE, "OPENAI_API_KEY": ""})  # an empty key is no key
    assert offline_model


def test_a_key_without_a_default_or_an_own_server_says_to_set_rlm_model():
    env, offline_model, notes = lab_settings({**BASE, "XAI_API_KEY": "xai-fake"})
    assert not offline_model and "RLM_MODEL" not in env
    assert "XAI_API_KEY" in notes[0] and "set RLM_MODEL" in notes[0]
    # RLM_API_BASE names a server of the user's own: a provider's default model would be wrong there
    env, _, notes = lab_settings({**BASE, "OPENAI_API_KEY": "sk-fake", "RLM_API_BASE": "http://127.0.0.1:1/v1"})
    assert "RLM_MODEL" not in env and "RLM_API_BASE" in notes[0]


@pytest.mark.kernel
def test_a_kernel_with_the_lab_environment_runs_a_cell_without_model(tmp_path):
    """The examples' cells have no --model: in a kernel given the lab's
    environment they run on the default model (here routed to the scripted
    server) and the note above the run says which model was chosen."""
    env, _, _ = lab_settings(clean_env(OPENAI_API_KEY="sk-fake-for-the-scripted-server-0"))
    script = Script(root=[repl("print(len(context))", prose="Measure."), "FINAL(done)"], root_models=("gpt-4o-mini",))
    with ScriptedServer(script) as srv:
        env.update(RLM_API_BASE=srv.url, LITELLM_LOCAL_MODEL_COST_MAP="True")
        kernel = Kernel("rlm", tmp_path, env=env)
        try:
            _run(kernel, "context = 'abc' * 10", 90)
            shown = _run(kernel, "%%rlm\nHow long is it?", 120)
            assert "chosen by rlm-kernel lab because OPENAI_API_KEY is set" in shown, shown
            assert "No model given" not in shown
            assert "final ['openai/gpt-4o-mini']" in _run(kernel, "print(rlm_result.reason, list(rlm_result.usage))", 30)
        finally:
            kernel.shutdown()
        assert [body["model"] for body in srv.calls()] == ["gpt-4o-mini", "gpt-4o-mini"]


def _run(kernel: Kernel, code: str, timeout: float) -> str:
    """Run ``code``; return the text of everything it showed (streams, displays, errors)."""
    _, messages = kernel.execute(code, timeout)
    return texts(messages, "stream", "display_data", "execute_result", "update_display_data", "error")
