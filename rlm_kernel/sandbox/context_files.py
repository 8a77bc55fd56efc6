"""How a context loaded from files reaches the confined kernel: the inside
loads it itself, with the same loader (``context.files.load_context``),
from the same files, read-only; converted documents (PDFs, tables...) are
passed in as they are, through a file, never converted again inside.

A file the confined kernel already sees (the file system is bound
read-only) is read where it is. A file in a hidden place (``/tmp``,
``/run``, the home folder) is bound read-only at its own path when the
run names it before the kernel starts (``rlm-kernel run --sandbox
--context``, ``RLM(sandbox=True)``); named later (``%rlm context`` in the
sandboxed kernel), it is hard-linked (the same file) or, across file
systems, copied into the sandbox's inbox, a folder the confined kernel
sees read-only. The inside says how many characters it read and a digest
of their ends; when that is not the value this side holds (the files
changed since, or ``context`` is not what they held), the value is passed
through a file instead (``SandboxExecutor.context_file``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from ..context.kinds import TEXT
from .launcher import under

PROBE_CHARS = 65536


def fingerprint(value: Any) -> list[Any] | None:
    """What the inside checks its load against: the kind, the characters and
    a digest of each part's ends; None for a value no file load gives."""
    parts = [value] if isinstance(value, str) else value
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        return None
    if any(getattr(p, "kind", "text") not in TEXT for p in parts):
        return None  # converted documents go in as they are (a pickle), not converted again inside
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(part[:PROBE_CHARS].encode("utf-8", "surrogatepass"))
        digest.update(part[-PROBE_CHARS:].encode("utf-8", "surrogatepass"))
    return ["str" if isinstance(value, str) else "list", sum(len(p) for p in parts), digest.hexdigest()]


class Inbox:
    """The files of a context, as paths the confined kernel can read."""

    def __init__(self, folder: Path, hidden: list[str], visible: list[str]) -> None:
        self.folder = folder  # bound read-only inside
        self.hidden = hidden  # roots the confined kernel does not see
        self.visible = visible  # folders it does see, under those roots (the sandbox folder, the bound files)
        self._count = 0

    def sees(self, path: str) -> bool:
        return not under(path, self.hidden) or under(path, self.visible)

    def inside_path(self, source: str, *, can_bind: list[str] | None) -> str:
        """Where the confined kernel reads ``source``: itself, bound at its own
        path (``can_bind``: the launch's bind list, before the kernel starts),
        or a link or copy in the inbox."""
        path = os.path.realpath(source)
        if not os.path.isfile(path):  # a label, or a file gone since: the value goes through a file instead
            raise FileNotFoundError(source)
        if self.sees(path):
            return path
        if can_bind is not None:
            can_bind.append(path)
            self.visible.append(path)
            return path
        self._count += 1
        target = self.folder / f"{self._count}-{os.path.basename(path)}"
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)  # the same file; the inbox's read-only mount keeps it unwritable inside
        except OSError:  # another file system, or not the person's own file (protected hard links)
            shutil.copyfile(path, target)
        return str(target)


__all__ = ["Inbox", "fingerprint"]
