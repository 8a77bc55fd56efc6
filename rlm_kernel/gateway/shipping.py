"""What goes over the wire to a gateway's kernel besides cells: our inside
code, and contexts given from here.

The kernel image needs nothing of ours (only Python 3.10+ and ipykernel):
the modules the inside runs (the bootstrap, the sub-call stand-ins, the
entries, the context loader and its description) go over as one zip,
written into the kernel's temp folder and put first on its ``sys.path``.
A context given from here (text, a list, loaded documents) goes as a pickle
in chunks, with a progress line for a large one, into a file there that
the inside loads (and deletes); nothing is ever unpickled on this side.
"""

from __future__ import annotations

import base64
import hashlib
import io
import pickle
import sys
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
# what the inside imports; each __init__ of ours holds only its docstring (and the version)
SHIPPED = ("__init__.py", "_version.py", "_words.py", "errors.py", "context", "engine/__init__.py",
           "engine/execution/__init__.py", "engine/execution/namespace.py", "engine/protocol/__init__.py",
           "engine/protocol/prompts.py", "engine/protocol/images.py", "remote/__init__.py", "remote/inside.py",
           "remote/calls.py")
CHUNK_BYTES = 1 << 20  # a context goes over 1 MiB at a time (a websocket message well under the servers' limits)
PROGRESS_BYTES = 8 << 20  # a progress line for contexts larger than this


@lru_cache(maxsize=1)
def inside_zip() -> tuple[bytes, str]:
    """Our inside modules as a zip, and a digest naming it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in SHIPPED:
            path = PACKAGE / entry
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for file in files:
                info = zipfile.ZipInfo("rlm_kernel/" + file.relative_to(PACKAGE).as_posix(), (2020, 1, 1, 0, 0, 0))
                archive.writestr(info, file.read_bytes(), zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    return data, hashlib.blake2b(data, digest_size=8).hexdigest()


def install_code() -> str:
    """The cell that installs our inside in a fresh kernel: the zip written
    once per content into its temp folder, first on its path, the bootstrap."""
    data, digest = inside_zip()
    return f"""
def _rlm_install(data):
    import base64, os, sys, tempfile
    path = os.path.join(tempfile.gettempdir(), 'rlm-kernel-inside-{digest}.zip')
    if not os.path.exists(path):
        part = path + '.%d' % os.getpid()
        with open(part, 'wb') as handle:
            handle.write(base64.b64decode(data))
        os.replace(part, path)
    if sys.path[:1] != [path]:
        sys.path.insert(0, path)
    for name in [n for n in sys.modules if n == 'rlm_kernel' or n.startswith('rlm_kernel.')]:
        del sys.modules[name]
    if sys.version_info < (3, 10):
        raise RuntimeError('the kernel runs Python %d.%d; rlm-kernel needs 3.10 or newer there' % sys.version_info[:2])
    import rlm_kernel.remote.inside as inside
    inside.install(get_ipython())
_rlm_install({base64.b64encode(data).decode()!r})
del _rlm_install
"""


def pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def chunks(data: bytes) -> list[str]:
    """The cells that write ``data`` into a new file there, one per chunk;
    the first makes the file (its path in ``_rlm_file``), the last says it."""
    cells = ["import tempfile as _t, os as _o\n_rlm_fd, _rlm_file = _t.mkstemp(prefix='rlm-context-', suffix='.pickle')\n"
             "_o.close(_rlm_fd)\ndel _t, _o, _rlm_fd"]
    for start in range(0, len(data), CHUNK_BYTES):
        piece = base64.b64encode(data[start:start + CHUNK_BYTES]).decode()
        cells.append(f"with open(_rlm_file, 'ab') as _h:\n    _h.write(__import__('base64').b64decode({piece!r}))\n"
                     "del _h")
    return cells


class Progress:
    """A line on stderr while a large context goes over (a kernel's stderr is its cell's output)."""

    def __init__(self, total: int) -> None:
        self.bar: Any = None
        if total > PROGRESS_BYTES:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc="sending the context to the gateway's kernel",
                            file=sys.stderr, delay=0.5, mininterval=0.2, ncols=100, leave=False)

    def update(self, sent: int) -> None:
        if self.bar is not None:
            self.bar.update(sent)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["CHUNK_BYTES", "Progress", "SHIPPED", "chunks", "inside_zip", "install_code", "pickled"]
