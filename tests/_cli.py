"""Running the ``rlm-kernel`` command of this environment in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from _helpers import ROOT, SUB, clean_env

CLI = str(Path(sys.executable).with_name("rlm-kernel"))


def run_args(api_base: str, output: Path | str, *, context: str = "doc.txt", query: str = "q",
             sub_model: bool = True) -> list[str]:
    """``rlm-kernel run`` arguments for a run on the scripted models (add
    ``--json``, ``--quiet``, ... after them)."""
    models = ["--model", ROOT, *(["--sub-model", SUB] if sub_model else [])]
    return ["run", "--context", context, "--query", query, *models, "--api-base", api_base, "-o", str(output)]


def run_cli(args: list[str], cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 120,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``rlm-kernel ARGS`` to the end, its output captured as text (``env``
    default: :func:`_helpers.clean_env`)."""
    return subprocess.run([CLI, *args], cwd=cwd, env=clean_env() if env is None else env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def start_cli(args: list[str], cwd: Path, *, env: dict[str, str] | None = None,
              text: bool = True) -> subprocess.Popen:
    """``rlm-kernel ARGS`` started, its stdout and stderr piped."""
    return subprocess.Popen([CLI, *args], cwd=cwd, env=clean_env() if env is None else env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text)
