"""Converted documents kept by the content hash of their input, so loading
the same files again reads the conversions instead of making them, and a
changed file (another hash) is converted again.

The folder is ``$RLM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlm-kernel/documents``
(``~/.cache/...``), readable only by its owner. Each entry is a pickle
written by this package (a bad input's sentence is kept too, so a scan is
not tried again); a file's hash is remembered by its size, times and inode,
so an unchanged file is not read again to be hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from typing import Any

from .convert import CONVERTER_VERSION

_INDEX = "hashes.json"


def folder() -> str:
    base = os.environ.get("RLM_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlm-kernel",
                            "documents")
    return base


class Cache:
    def __init__(self, where: str | None = None) -> None:
        self.folder = where or folder()
        self._hashes: dict[str, list[Any]] | None = None
        self._changed = False

    # -- hashes -----------------------------------------------------------
    def _index(self) -> dict[str, list[Any]]:
        if self._hashes is None:
            try:
                with open(os.path.join(self.folder, _INDEX), encoding="utf-8") as handle:
                    self._hashes = json.load(handle)
            except (OSError, ValueError):
                self._hashes = {}
        return self._hashes

    def file_hash(self, path: str, remember: bool = True) -> str:
        """The hash of a file's bytes; ``remember`` False for a file that will
        not be there again (an archive's member, expanded for one load)."""
        real = os.path.realpath(path)
        stat = os.stat(real)
        mark = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
        known = self._index().get(real)
        if known and known[:4] == mark:
            return str(known[4])
        digest = hashlib.blake2b(digest_size=20)
        with open(real, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        found = digest.hexdigest()
        if remember:
            self._index()[real] = [*mark, found]
            self._changed = True
        return found

    def save_index(self) -> None:
        if self._changed and self._hashes is not None:
            self._write(_INDEX, json.dumps(self._hashes).encode("utf-8"))
            self._changed = False

    # -- entries ----------------------------------------------------------
    @staticmethod
    def key(digest: str, kind: str, encoding: str = "utf-8") -> str:
        return f"{digest}-{kind}-{encoding}-v{CONVERTER_VERSION}"

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key + ".pickle")

    def get(self, key: str) -> tuple[bool, Any]:
        """(found, value); a value is the entry, or ``("error", sentence)``."""
        try:
            with open(self._path(key), "rb") as handle:
                return True, pickle.load(handle)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError):
            return False, None

    def put(self, key: str, value: Any) -> None:
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an entry that does not pickle is simply not cached
            return
        self._write(os.path.join(key[:2], key + ".pickle"), data)

    def _write(self, name: str, data: bytes) -> None:
        target = os.path.join(self.folder, name)
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            handle, scratch = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".part-")
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(scratch, target)
        except OSError:
            pass  # a read-only or full cache folder: the load goes on uncached


__all__ = ["Cache", "folder"]
