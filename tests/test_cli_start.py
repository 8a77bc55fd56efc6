"""``rlm-kernel run`` imports litellm while the context loads: the context
here is a URL whose server, in the CLI's own process, answers only once
litellm is imported there. With the import begun before the load, the run
goes on; with litellm imported after the load (as a run first needs it), the
server gives up and the run has no context."""

from __future__ import annotations

import subprocess
import sys

from _helpers import ROOT, clean_env, repl

from rlm_kernel.testing.server import Script, ScriptedServer

WAIT_S = 30  # how long the context's server waits for litellm before it gives up

# The CLI in-process, beside a web server that serves its context only once
# litellm is imported (by anyone) in that process.
CLI_WITH_GATED_CONTEXT = f"""
import sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from rlm_kernel.engine.model.litellm_setup import litellm_loaded

class Gate(BaseHTTPRequestHandler):
    def do_GET(self):
        deadline = time.monotonic() + {WAIT_S}
        while not litellm_loaded() and time.monotonic() < deadline:
            time.sleep(0.02)
        body = b"litellm was imported while the context loaded" if litellm_loaded() else b"no litellm"
        self.send_response(200 if litellm_loaded() else 503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Gate)
threading.Thread(target=server.serve_forever, daemon=True).start()
from rlm_kernel.cli import main
url = f"http://127.0.0.1:{{server.server_address[1]}}/context.txt"
sys.exit(main(["run", "--context", url, *sys.argv[1:]]))
"""


def test_a_cli_run_imports_litellm_while_its_context_loads(tmp_path) -> None:
    with ScriptedServer(Script(root=[repl("FINAL(str(context))")])) as server:
        done = subprocess.run(
            [sys.executable, "-c", CLI_WITH_GATED_CONTEXT, "--query", "What is it?", "--model", ROOT,
             "--api-base", server.url, "-o", str(tmp_path / "run.ipynb"), "--quiet"],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=WAIT_S + 90)
    assert done.returncode == 0, done.stderr
    assert "litellm was imported while the context loaded" in done.stdout, done.stdout
