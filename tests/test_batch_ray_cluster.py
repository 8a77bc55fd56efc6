"""``rlm-kernel batch --ray ADDRESS`` on a Ray cluster started apart, as a
user starts one: ``ray start --head`` with token auth on a free port. The
batch's tasks must run in that cluster's workers (their parent is its raylet)
and answer; a missing or wrong token, or an address where nothing listens,
is refused in one sentence. The cluster is stopped by the ids of its own
processes (``ray stop`` would stop every Ray on the machine)."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from _cli import CLI
from _helpers import clean_env, free_port, repl

from rlm_kernel.testing.server import ScriptedServer, all_text

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")

RAY = str(Path(sys.executable).with_name("ray"))
TASKS = 4
STEP = repl("import os\nprint('pids', os.getpid(), os.getppid())\nprint(llm_query('summarize: ' + context[:40]))")


def responder(body: dict) -> str:
    """Root: one step that says where it runs, then an answer naming the task."""
    if body.get("model") != "root-model":
        return "a summary"
    number = re.search(r"QUESTION-(\d+)", all_text(body)).group(1)
    return STEP if len(body["messages"]) <= 2 else f"FINAL(answer-{number})"


@dataclass
class Cluster:
    address: str
    token: str
    temp: str  # the cluster's --temp-dir: every one of its processes names it

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(**{"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, **extra})

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes (those naming its temp dir) and their children."""
        mine = {psutil.Process().pid, *(p.pid for p in psutil.Process().parents())}
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            if process.pid not in mine and self.temp in " ".join(process.info["cmdline"] or []):
                found[process.pid] = process
        for process in list(found.values()):
            try:
                found.update((child.pid, child) for child in process.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        return list(found.values())

    def raylet(self) -> psutil.Process:
        return next(p for p in self.processes() if p.name() == "raylet")

    def stop(self) -> None:
        family = self.processes()
        for process in family:
            try:
                process.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=10)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=20)


def other_rays() -> list[int]:
    return [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in ("raylet", "gcs_server")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    deadline = time.monotonic() + 120
    while other_rays():  # never start a cluster beside another Ray on this machine
        if time.monotonic() > deadline:
            pytest.skip(f"another Ray is running on this machine (pids {other_rays()})")
        time.sleep(2)
    temp = tempfile.mkdtemp(prefix="rlm-ray-", dir="/tmp")  # short: Ray's socket paths live under it
    ray_cluster = Cluster(f"127.0.0.1:{free_port()}", secrets.token_hex(16), temp)
    try:
        started = subprocess.run(
            [RAY, "start", "--head", f"--port={ray_cluster.address.rsplit(':', 1)[1]}", "--node-ip-address=127.0.0.1",
             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
            env=ray_cluster.env(), capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        yield ray_cluster
    finally:
        ray_cluster.stop()
        assert not ray_cluster.processes(), "the cluster's processes outlived its stop"
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def models() -> Iterator[ScriptedServer]:
    with ScriptedServer(responder) as srv:
        yield srv


def tasks_file(folder: Path) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "query": f"QUESTION-{i}", "context_text": f"text {i} " * 9})
                            + "\n" for i in range(TASKS)), encoding="utf-8")
    return path


def batch(folder: Path, models: ScriptedServer, address: str, env: dict[str, str],
          timeout: float = 600) -> tuple[subprocess.CompletedProcess, int]:
    """The batch as a user runs it: its completed process and its pid."""
    command = [CLI, "batch", str(tasks_file(folder)), "--out", str(folder / "out"), "--model", "openai/root-model",
               "--sub-model", "openai/sub-model", "--api-base", models.url, "--max-iterations", "5",
               "--ray", address]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), process.pid


def test_a_batch_runs_on_a_cluster_started_apart_with_token_auth(cluster, models, tmp_path):
    raylet = cluster.raylet().pid
    before = len(models.requests)
    done, driver = batch(tmp_path, models, cluster.address, cluster.env())
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    lines = {line["id"]: line for line in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(lines) == [f"t{i}" for i in range(TASKS)]
    workers = set()
    for number in range(TASKS):
        line = lines[f"t{number}"]
        assert line["reason"] == "final" and line["answer"] == f"answer-{number}", line
        assert line["iterations"] == 2 and line["subcalls"] == 1 and line["notebook"] == str(out / f"t{number}.ipynb")
        notebook = nbformat.read(out / f"t{number}.ipynb", as_version=4)
        assert notebook.metadata["rlm"]["runs"][-1]["reason"] == "final"
        code = next(c for c in notebook.cells if c.metadata.get("rlm", {}).get("role") == "code")
        pid, parent = map(int, re.search(r"pids (\d+) (\d+)", code.outputs[0]["text"]).groups())
        assert parent == raylet, "a task ran outside the cluster's workers"  # not in a local instance's
        assert pid != driver
        workers.add(pid)
    assert len(models.requests) - before == 3 * TASKS  # two root calls and one sub-call per task
    written = done.stderr + done.stdout + "".join(p.read_text() for p in out.iterdir())
    assert cluster.token not in written


TOKEN_CASES = pytest.mark.parametrize("env_of, said", [
    (lambda c: clean_env(), r"The Ray cluster at 127\.0\.0\.1:\d+ asks for its auth token: set RAY_AUTH_MODE=token "
                            r"and RAY_AUTH_TOKEN \(or RAY_AUTH_TOKEN_PATH\) to the cluster's token\."),
    (lambda c: c.env(RAY_AUTH_TOKEN="0" * 32),
     r"The Ray cluster at 127\.0\.0\.1:\d+ refused this machine's token \(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
     r"~/\.ray/auth_token\): set the token the cluster was started with\."),
    (lambda c: clean_env(RAY_AUTH_MODE="token", HOME=c.temp),  # no ~/.ray/auth_token there
     r"RAY_AUTH_MODE is token but no token was found: set RAY_AUTH_TOKEN \(or RAY_AUTH_TOKEN_PATH\) to the token "
     r"of the Ray cluster at 127\.0\.0\.1:\d+\."),
], ids=["no-token", "wrong-token", "token-mode-without-token"])


@TOKEN_CASES
def test_a_missing_or_wrong_token_is_refused_in_one_sentence(cluster, models, tmp_path, env_of, said):
    before = len(models.requests)
    done, _ = batch(tmp_path, models, cluster.address, env_of(cluster), timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch("rlm-kernel: error: " + said, last), last
    assert len(models.requests) == before and not list((tmp_path / "out").glob("*.ipynb"))


CHECK_TOKEN = """
import sys
from rlm_kernel.batch.ray_tasks import check_token
from rlm_kernel.errors import RLMError
try:
    check_token(sys.argv[1])
except RLMError as error:
    sys.exit(str(error))
print("taken")
"""


@TOKEN_CASES
def test_the_token_is_checked_before_ray_connects(cluster, env_of, said):
    """The batch's own check, one connection to the cluster's GCS: Ray's
    connect would try again for ~20 s before it said the token was refused."""
    done = subprocess.run([sys.executable, "-c", CHECK_TOKEN, cluster.address], env=env_of(cluster),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "", done
    assert re.fullmatch(said, done.stderr.strip().splitlines()[-1]), done.stderr


def test_the_right_token_passes_the_check(cluster):
    done = subprocess.run([sys.executable, "-c", CHECK_TOKEN, cluster.address], env=cluster.env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "taken\n", done


def test_an_address_where_nothing_listens_is_refused_at_once(models, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done, _ = batch(tmp_path, models, address, clean_env(), timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"rlm-kernel: error: Nothing answers at {address} (Connection refused): start the cluster with " \
           "`ray start --head`" in done.stderr
    assert time.monotonic() - started < 30  # Ray alone tries for minutes
