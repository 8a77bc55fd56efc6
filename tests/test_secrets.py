"""Secrets and trust.

Secrets: one scenario with recognisable fake keys (in the environment, and
one given in code) runs ``rlm-kernel run``, ``rlm-kernel export``, the Python
API and a real RLM kernel, each with an error path and with generated code
that prints a key; then every file under the scenario's directory, every
captured stdout/stderr, every iopub message of the kernel (widget state
included) and every request the root model received are scanned for the keys.

Trust: ``--no-network-in-code`` refuses sockets, host lookups and new
processes to generated code (and to threads it starts) while sub-calls go
on; without it the same code connects.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest
from _cli import run_cli
from _helpers import cell_text, cells_by_role, clean_env, repl
from _kernel import Kernel

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

ENV_KEY = "sk-FAKE-env-4f1c9a7e2b8d6035aa"
ANTHROPIC_KEY = "sk-ant-FAKE-1b2c3d4e5f60718293"
CODE_KEY = "FAKEKEY-given-in-code-93e7c1d5b2a4"  # no sk- prefix: only remembering it can redact it
KEYS = (ENV_KEY, ANTHROPIC_KEY, CODE_KEY)

LEAKY_STEP = repl(
    "import os\n"
    "print('my key is', os.environ.get('OPENAI_API_KEY'), os.environ.get('ANTHROPIC_API_KEY'))\n"
    "try:\n"
    "    llm_query('call with a bad request')\n"
    "except Exception as error:\n"
    "    print('sub-call failed:', error)\n"
    "os.environ.get('OPENAI_API_KEY')"
)


def leaky_sub(key: str):
    """A provider that echoes the key it was sent back in its errors, as real ones partly do."""
    return lambda prompt: Reply(status=400, text=f"bad request from key {key}")


def find_keys(text: str) -> list[str]:
    found = [key for key in KEYS if key in text]
    return found + (["a FAKE key fragment"] if "FAKE-env" in text or "given-in-code" in text else [])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    base = tmp_path_factory.mktemp("secrets")
    (base / "context.txt").write_text("A short context about keys and locks.\n", encoding="utf-8")
    servers = {
        "ok": ScriptedServer(Script(root=[LEAKY_STEP, "FINAL(done)"] * 3, sub=leaky_sub(ENV_KEY))).start(),
        "rejecting": ScriptedServer(
            lambda body: Reply(status=401, text=f"Incorrect API key provided: {ENV_KEY}.")).start(),
    }
    env = clean_env(OPENAI_API_KEY=ENV_KEY, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
    outputs: dict[str, str] = {}
    kernel = Kernel("rlm", base, env=env, log=base / "kernel.log")
    try:
        def cli(name: str, *args: str) -> subprocess.CompletedProcess:
            proc = run_cli(list(args), base, env=env, timeout=180)
            outputs[f"{name} stdout"], outputs[f"{name} stderr"] = proc.stdout, proc.stderr
            return proc

        common = ["--context", str(base / "context.txt"), "--query", "Which key opens it?"]
        runs = {
            "cli run": cli("cli run", "run", *common, "--model", "openai/root-model", "--sub-model",
                           "openai/sub-model", "--api-base", servers["ok"].url, "-o", "cli.ipynb", "--json"),
            "cli rejected key": cli("cli rejected key", "run", *common, "--model", "openai/root-model",
                                    "--api-base", servers["rejecting"].url, "-o", "rejected.ipynb"),
            "cli unknown model": cli("cli unknown model", "run", *common, "--model", "nosuchprovider/x"),
        }
        runs["cli export"] = cli("cli export", "export", "cli.ipynb", "-o", "cli-export.md")

        kernel.import_litellm()
        cells = {
            "context": f"%rlm context {base / 'context.txt'}",
            "run": f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                   f"--api-base {servers['ok'].url}\nWhich key opens it?",
            "rejected": f"%%rlm --model openai/root-model --api-base {servers['rejecting'].url}\nq",
            "result": "print(rlm_result.reason, rlm_result.error)",
        }
        kernel_replies = {name: kernel.execute(code)[0] for name, code in cells.items()}

        from rlm_kernel import RLM

        saved = {name: os.environ.get(name) for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        os.environ.update(OPENAI_API_KEY=ENV_KEY, ANTHROPIC_API_KEY=ANTHROPIC_KEY)  # for the code to print
        api_server = ScriptedServer(Script(root=[LEAKY_STEP, "FINAL(done)"], sub=leaky_sub(CODE_KEY))).start()
        servers["api"] = api_server
        rlm = RLM(model="openai/root-model", sub_model="openai/sub-model", api_base=api_server.url,
                  api_key=CODE_KEY, retry_base_delay=0.01)
        outputs["api repr"] = repr(rlm)
        api_result = rlm.completion("some context", "Which key?", output=base / "api.ipynb")
        outputs["api result"] = json.dumps(api_result.to_json())
        api_rejected = RLM(model="openai/root-model", api_base=servers["rejecting"].url, api_key=CODE_KEY,
                           max_retries=0).completion("ctx", "q")
        outputs["api rejected error"] = api_rejected.error or ""
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield {"base": base, "runs": runs, "outputs": outputs, "kernel": kernel, "servers": servers,
               "kernel_replies": kernel_replies, "api_result": api_result, "api_rejected": api_rejected}
    finally:
        kernel.shutdown()
        for srv in servers.values():
            srv.stop()


def test_every_step_of_the_scenario_did_its_work(scenario):
    runs, replies = scenario["runs"], scenario["kernel_replies"]
    assert runs["cli run"].returncode == 0, runs["cli run"].stderr
    assert json.loads(runs["cli run"].stdout)["answer"] == "done"
    assert runs["cli rejected key"].returncode == 1 and "OPENAI_API_KEY" in runs["cli rejected key"].stderr
    assert runs["cli unknown model"].returncode == 2
    assert runs["cli export"].returncode == 0, runs["cli export"].stderr
    assert all(replies[name]["status"] == "ok" for name in ("context", "run", "result"))
    assert replies["rejected"]["status"] == "error" and "OPENAI_API_KEY" in replies["rejected"]["evalue"]
    result = scenario["api_result"]
    assert result.reason == "final"
    # the leaky code really ran: it printed the (redacted) keys and caught the echoing error
    text = cell_text(cells_by_role(result.notebook, "code")[0])
    assert "my key is" in text and "sub-call failed" in text and "<OPENAI_API_KEY>" in text
    assert "OPENAI_API_KEY" in scenario["api_rejected"].error
    files = [p for p in scenario["base"].rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"cli.ipynb", "rejected.ipynb", "cli-export.md", "api.ipynb", "kernel.log"} <= names
    assert list((scenario["base"] / "rlm-runs").glob("*.ipynb")), "the kernel runs wrote no trajectory"


def test_no_written_file_holds_a_key(scenario):
    files = [p for p in scenario["base"].rglob("*") if p.is_file()]
    assert len(files) >= 6
    leaks = {str(p.relative_to(scenario["base"])): find_keys(p.read_text(errors="replace")) for p in files}
    assert not {name: keys for name, keys in leaks.items() if keys}


def test_no_output_message_or_error_holds_a_key(scenario):
    texts = dict(scenario["outputs"])
    for name, reply in scenario["kernel_replies"].items():
        texts[f"kernel reply {name}"] = json.dumps(reply)
    texts["kernel iopub (outputs, comm and widget state)"] = json.dumps(scenario["kernel"].messages, default=str)
    texts["api notebook in memory"] = json.dumps(scenario["api_result"].notebook)
    assert len(scenario["kernel"].messages) > 20
    leaks = {name: find_keys(text) for name, text in texts.items()}
    assert not {name: keys for name, keys in leaks.items() if keys}


def test_the_root_model_is_never_told_a_key(scenario):
    for name, srv in scenario["servers"].items():
        for body in srv.calls():
            assert not find_keys(json.dumps(body)), f"a request to the {name} server carried a key"
    told = [body for body in scenario["servers"]["ok"].calls("root-model") if len(body["messages"]) > 2]
    assert told and "my key is <OPENAI_API_KEY>" in json.dumps(told)


# -- --no-network-in-code ----------------------------------------------------------------

REACH_OUT = """\
import os, socket, subprocess, threading, urllib.request

def attempt(action):
    try:
        action()
        return 'allowed'
    except OSError as error:  # PermissionError, or urllib's URLError around it
        return 'blocked' if 'no-network-in-code' in str(error) else f'failed: {error}'

def connect():
    socket.create_connection(('127.0.0.1', PORT), timeout=5).close()

results = {
    'connect': attempt(connect),
    'urlopen': attempt(lambda: urllib.request.urlopen('URL/models', timeout=5).read()),
    'resolve': attempt(lambda: socket.getaddrinfo('localhost', 80)),
    'subprocess': attempt(lambda: subprocess.run(['true'], check=True)),
    'os.system': attempt(lambda: os.system('true')),
}
box = {}
worker = threading.Thread(target=lambda: box.update(thread=attempt(connect)))
worker.start()
worker.join()
results.update(box)
results['llm_query'] = llm_query('still allowed')
print(sorted(results.items()))
"""


def reach_out_code(srv: ScriptedServer) -> str:
    port = srv.url.split(":")[2].split("/")[0]
    return REACH_OUT.replace("PORT", port).replace("URL", srv.url)


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
def test_no_network_in_code_blocks_sockets_and_processes(server, make_rlm, guarded):
    import socket

    srv = server()
    srv.responder = Script(root=[repl(reach_out_code(srv)), "FINAL(ok)"])
    result = make_rlm(srv, no_network_in_code=guarded).completion("ctx", "q")
    assert result.reason == "final"
    printed = cell_text(cells_by_role(result.notebook, "code")[0])
    verdict = "blocked" if guarded else "allowed"
    for action in ("connect", "urlopen", "resolve", "subprocess", "os.system", "thread"):
        assert f"('{action}', '{verdict}')" in printed, printed
    assert "('llm_query', 'echo: still allowed')" in printed
    assert ("--no-network-in-code" in result.notebook.cells[1].source) is guarded
    # the guard covers generated code only: this thread connects again after the run
    port = int(srv.url.split(":")[2].split("/")[0])
    socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_no_network_in_code_in_the_kernel_leaves_human_cells_alone(tmp_path):
    srv = ScriptedServer(Script(root=[], sub=lambda p: f"echo: {p}")).start()
    srv.responder = Script(root=[repl(reach_out_code(srv)), "FINAL(ok)"])
    kernel = Kernel("rlm", tmp_path, log=tmp_path / "kernel.log")
    try:
        kernel.execute("context = 'x'")
        reply, _ = kernel.execute(f"%%rlm --model openai/root-model --sub-model openai/sub-model "
                               f"--api-base {srv.url} --no-network-in-code\nReach out.")
        assert reply["status"] == "ok", reply
        printed = "".join(m["content"].get("text", "") for m in kernel.messages if m["msg_type"] == "stream")
        assert "('connect', 'blocked')" in printed and "('subprocess', 'blocked')" in printed
        assert "('llm_query', 'echo: still allowed')" in printed
        kernel.messages.clear()
        reply, _ = kernel.execute("import subprocess\nprint(subprocess.run(['echo', 'human'], capture_output=True, text=True).stdout)")
        assert reply["status"] == "ok", reply
        assert "human" in "".join(m["content"].get("text", "") for m in kernel.messages if m["msg_type"] == "stream")
    finally:
        kernel.shutdown()
        threading.Thread(target=srv.stop, daemon=True).start()


# -- key shapes: keys that are not in the environment -----------------------------------

# Made-up keys in each provider's shape (no real key has these values).
SHAPED_KEYS = {
    "google": "AIzaSyFAKE0kEy-for_tests0123456789abcde",
    "openai project": "sk-proj-FAKE0a1b2c3d4e5f6g7h8i9j0kLmNoPqRsT",
    "anthropic": "sk-ant-api03-FAKE0a1b2c3d4e5f6g7h8i9j0k-AbCdEf",
    "xai": "xai-FAKE0a1b2c3d4e5f6g7h8i9j0kLmNoPqRsTuVwX",
    "groq": "gsk_FAKE0a1b2c3d4e5f6g7h8i9j0kLmNoPqRsTuVwXyZ",
    "hugging face": "hf_FAKE0a1b2c3d4e5f6g7h8i9j0kLmNoPqRs",
    "github classic": "ghp_FAKE0a1b2c3d4e5f6g7h8i9j0kLmNoPqRsTu",
    "github fine-grained": "github_pat_11FAKE0a1b2c3d4e5f6g7_h8i9j0kLmNoPqRsTuVwXyZ",
    "aws access key id": "AKIAFAKE0A1B2C3D4E5F",
}
ASSIGNED = {
    "env line": ("MY_SERVICE_TOKEN=9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
    "python": ('api_key = "FAKEz81Qw9ErTy12345uiop"', "FAKEz81Qw9ErTy12345uiop"),
    "json": ('{"client_secret": "FAKE-aa11bb22cc33dd44"}', "FAKE-aa11bb22cc33dd44"),
    "yaml": ("password: FAKE7correct-horse-battery", "FAKE7correct-horse-battery"),
    "header": ("Authorization: Bearer FAKE.eyJ0eXAiOiJKV1Qi.0123456789", "FAKE.eyJ0eXAiOiJKV1Qi.0123456789"),
}
# Text that looks a little like a key and must come through unchanged.
NOT_KEYS = [
    "The Bearer authentication scheme sends a token; see RFC 6750.",
    "sorted(rows, key=lambda row: row['verse_12_chapter_3'])",
    "max_tokens=4096, prompt_tokens: 12345678901234567, completion_tokens: 98765432109876543",
    'tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased-2024-v12")',
    "from huggingface_hub import hf_hub_download_and_cache_everything_now",
    "pip install sk-learn-compatible-estimators; import ghp_helpers",
    "models: anthropic/claude-3-5-haiku-20241022, openai/gpt-4o-mini-2024-07-18, gemini/gemini-2.0-flash",
    "EURASIA0123456789ABCDEF and AIzawa are no keys; neither is a short AIza0123.",
    "cache_key = 'verse_12_chapter_3_genesis_kjv'; monkey: abcdef1234567890abc",
    "the secret: it is what it is, 2024 and beyond; password: hunter2",
    "sha 3f2a9c1e5b7d4f6a8c0e2b4d6f8a0c2e4b6d8f0a, run id 20250101-120000-ab12cd34",
]


@pytest.mark.parametrize("name", list(SHAPED_KEYS))
def test_a_key_shaped_string_is_redacted_wherever_it_comes_from(name):
    from rlm_kernel.redaction import redact

    key = SHAPED_KEYS[name]
    for text in (key, f"my key: {key}.", f'GEMINI = "{key}"\nprint(GEMINI)', f"line one\n{key}\nline three"):
        assert key not in redact(text) and "<redacted>" in redact(text), text
        # the same text inside JSON (a notebook, a JSONL export), where a line break is an escape
        dumped = json.dumps({"source": text, "ascii": "é" + text}, ensure_ascii=True)
        assert key not in redact(dumped) and json.loads(redact(dumped))["source"] != text, dumped


@pytest.mark.parametrize("name", list(ASSIGNED))
def test_a_long_random_value_given_to_a_credential_name_is_redacted(name):
    from rlm_kernel.redaction import redact

    text, value = ASSIGNED[name]
    for shown in (text, json.dumps({"text": text})):
        assert value not in redact(shown) and "<redacted>" in redact(shown), shown
    assert redact(text).split("<redacted>")[0] == text.split(value)[0]  # the name stays readable


@pytest.mark.parametrize("text", NOT_KEYS)
def test_ordinary_text_is_left_alone(text):
    from rlm_kernel.redaction import redact

    assert redact(text) == text
    assert redact(json.dumps(text)) == json.dumps(text)


def test_a_key_shaped_string_printed_by_generated_code_never_reaches_the_notebook(run_rlm, tmp_path):
    # not a key of this environment: only its shape gives it away
    key = SHAPED_KEYS["google"]
    out = tmp_path / "run.ipynb"
    code = f"```repl\nleaked = 'AI' + 'za' + {key[4:]!r}\nprint('found', leaked)\n```\nFINAL(done)"
    result, _ = run_rlm(root=[code], output=out)
    assert result.reason == "final"
    text = out.read_text(encoding="utf-8")
    assert "found" in text and key not in text and "<redacted>" in text


def test_a_key_set_or_remembered_after_an_earlier_redaction_is_redacted_too(monkeypatch):
    from rlm_kernel.redaction import redact_secrets, remember_secret

    assert redact_secrets("nothing secret here") == "nothing secret here"
    monkeypatch.setenv("LATE_API_KEY", "late-key-value-1234")
    assert redact_secrets("it is late-key-value-1234") == "it is <LATE_API_KEY>"
    remember_secret("given-in-code-5678")
    assert redact_secrets("and given-in-code-5678") == "and <api_key>"
    monkeypatch.delenv("LATE_API_KEY")
    assert redact_secrets("it is late-key-value-1234") == "it is late-key-value-1234"
