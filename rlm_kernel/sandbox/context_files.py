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
through a file instead (:meth:`SandboxCourier.context_file`).
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..remote.inside import fingerprint

if TYPE_CHECKING:
    from ..remote.executor import RemoteExecutor

def hidden_roots() -> list[str]:
    home = os.path.expanduser("~")
    roots = ["/tmp", "/run"]
    if home not in ("/", "") and not any(home == r or home.startswith(r + "/") for r in roots):
        roots.append(home)
    return roots


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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


class SandboxCourier:
    """How a run's context reaches the confined kernel: read there from its
    files (bound or linked into the inbox), else a pickle in the sandbox's
    state folder (written here, read there; nothing is ever unpickled here)."""

    def __init__(self, executor: RemoteExecutor) -> None:
        self.executor = executor
        spec = executor.spec
        self.spec = spec
        self.inbox = Inbox(spec.inbox, hidden_roots(), [str(spec.folder.resolve()), str(spec.state.resolve())])
        self._files = 0

    def bind(self, sources: list[str] | None) -> None:
        """Before the start: the files a run's context came from, bound read-only at their own paths."""
        for source in sources or []:
            try:
                self.inbox.inside_path(source, can_bind=self.spec.bound)
            except OSError:
                pass  # not a file: nothing to bind (the value is handed in through a file)

    def hand_over(self, name: str, value: Any, sources: list[str] | None) -> str | None:
        executor = self.executor
        expected = fingerprint(value) if sources else None
        if expected is not None:
            bind = None if executor.client is not None else self.spec.bound  # before the start: bound at launch
            try:
                paths = [self.inbox.inside_path(source, can_bind=bind) for source in sources or []]
            except OSError:
                paths = []
            if paths and executor.call("read", name, paths, executor.context_encoding, expected) is None:
                return None
        return self.context_file(value)

    def context_file(self, value: Any) -> str:
        self._files += 1
        path = Path(self.spec.state) / f"context-{self._files}.pickle"
        with open(path, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(path, 0o600)
        return str(path)


__all__ = ["Inbox", "SandboxCourier", "fingerprint", "hidden_roots", "under"]
