"""``rlm-kernel serve``: the RLM behind the real litellm proxy.

We write a proxy config that serves one model name (``--name``) through our
custom provider, and start litellm's own proxy on it in a child process.
Keys, budgets, rate limits, logging and several workers are the proxy's
features (its docs say how); we only add the model. The proxy refuses to
start without a master key: ``--api-key``, else ``$LITELLM_MASTER_KEY``, else
a new key printed once on the terminal. The key reaches the proxy through
its environment and is written to no file.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._local_server import wait_until_serving
from ..engine.runs import options
from ..engine.runs.options import whole_number
from ..errors import RLMError
from .provider import PROVIDER, SETTINGS_ENV

KEY_ENV = "LITELLM_MASTER_KEY"
HANDLER = "rlm_kernel.serve.provider.rlm_handler"
PROXY_DOCS = "https://docs.litellm.ai/docs/simple_proxy"


def add_serve_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve the RLM as an OpenAI-compatible model (the litellm proxy)",
        description="Serve the RLM as a model any OpenAI client can call, through the litellm proxy. "
                    "Each request's messages are the context, its last user message the query; each run's "
                    f"trajectory notebook goes to --runs-dir. Keys, budgets, rate limits, logging: {PROXY_DOCS}",
    )
    serve.add_argument("--port", type=whole_number(1), default=4000, help="port (default 4000)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; 0.0.0.0 serves other machines)")
    serve.add_argument("--name", default="rlm", help="the model name clients ask for (default rlm)")
    serve.add_argument("--runs-dir", default="rlm-runs", help="folder for the runs' notebooks (default rlm-runs)")
    serve.add_argument("--api-key", metavar="KEY",
                       help=f"the key clients send (the proxy's master key; default: ${KEY_ENV}, else a new "
                            "one printed once)")
    serve.add_argument("--workers", type=whole_number(1), default=1,
                       help="proxy worker processes (default 1; each runs its own RLMs)")
    options.add_arguments(serve)


def proxy_config(name: str, root_model: str) -> dict[str, Any]:
    """The proxy's config: one model served by our provider. The proxy's
    Router must not retry a run (a failed run is not a flaky call). A client
    that hangs up on a plain (not streamed) request is noticed only by the
    proxy, which then cancels the call (``cancel_on_disconnect``): the
    provider's ``acompletion`` sees the cancel and interrupts the run, as a
    closed stream does."""
    return {
        "model_list": [{"model_name": name, "litellm_params": {"model": f"{PROVIDER}/{root_model}"}}],
        "litellm_settings": {"custom_provider_map": [{"provider": PROVIDER, "custom_handler": HANDLER}]},
        "router_settings": {"num_retries": 0},
        "general_settings": {"cancel_on_disconnect": True},
    }


def new_key() -> str:
    return "sk-" + secrets.token_hex(32)  # the shape the proxy's own docs suggest


def write_files(folder: Path, args: argparse.Namespace, given: dict[str, Any]) -> tuple[Path, Path]:
    """The proxy config and our settings file (run options; never a key)."""
    import yaml

    settings = folder / "rlm-serve-settings.json"
    settings.write_text(json.dumps({"runs_dir": os.path.abspath(args.runs_dir), "options": given}, indent=1),
                        encoding="utf-8")
    config = folder / "proxy-config.yaml"
    config.write_text(yaml.safe_dump(proxy_config(args.name, given["model"]), sort_keys=False), encoding="utf-8")
    return config, settings


def proxy_command(config: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", str(config), "--host", args.host,
            "--port", str(args.port), "--num_workers", str(args.workers)]


def check_installed() -> None:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "apscheduler", "orjson") if importlib.util.find_spec(m) is None]
    if missing:
        raise RLMError("rlm-kernel serve needs the litellm proxy, which is not installed "
                       f"({', '.join(missing)} missing): pip install 'rlm-kernel[serve]'.")


def run_serve(args: argparse.Namespace) -> int:
    from ..builder import check_models

    check_installed()
    given = options.given(args)
    given.setdefault("model", os.environ.get("RLM_MODEL") or None)
    if not given["model"]:
        raise RLMError("Give the root model to serve with --model (a litellm name, e.g. openai/gpt-4o-mini).")
    run_options = options.resolve(given)
    check_models(run_options)
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    key, made = args.api_key or os.environ.get(KEY_ENV), False
    if not key:
        key, made = new_key(), True
    folder = Path(tempfile.mkdtemp(prefix="rlm-serve-"))
    try:
        config, settings = write_files(folder, args, {k: v for k, v in given.items() if v is not None})
        env = {**os.environ, KEY_ENV: key, SETTINGS_ENV: str(settings), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}"
        say(f"serving the RLM as model {args.name!r} (root model {run_options.model}, sub-model "
            f"{run_options.sub_model}) at {url}/v1; trajectories in {os.path.abspath(args.runs_dir)}")
        if made:
            say(f"API key for this server (made now, shown once, stored nowhere): {key}")
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            say("listening beyond this machine: the models' code runs here with your rights (see docs/guide/trust.md)")
        proxy = subprocess.Popen(proxy_command(config, args), env=env)
        threading.Thread(target=_announce_ready, args=(proxy, url), daemon=True).start()
        return _wait(proxy)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def say(text: str) -> None:
    print(f"rlm-kernel: {text}", file=sys.stderr, flush=True)


def _announce_ready(proxy: subprocess.Popen[Any], url: str, timeout: float = 300.0) -> None:
    if wait_until_serving(f"{url}/health/liveliness", proxy, timeout, poll=0.5):
        say(f"ready: {url}/v1")


def _wait(proxy: subprocess.Popen[Any]) -> int:
    """Wait for the proxy. Ctrl-C reaches it from the terminal as well (it
    shuts down by itself); SIGTERM is passed on to it."""
    got: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    saved = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        return proxy.wait()
    except KeyboardInterrupt:
        if got:
            proxy.terminate()
        try:
            proxy.wait(15)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()
        return 130
    finally:
        if saved is not None:
            signal.signal(signal.SIGTERM, saved)


__all__ = ["add_serve_parser", "new_key", "proxy_config", "run_serve"]
