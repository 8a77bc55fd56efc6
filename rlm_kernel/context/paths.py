"""Where the inputs are: paths, folders (walked, sorted, hidden files left
out) and globs expanded to files; and the memory free to load them into."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ..errors import ContextError


def expand_paths(patterns: list[str]) -> list[Path]:
    """Files named by paths, directories (walked, sorted) and globs, in order."""
    files: list[Path] = []
    for pattern in patterns:
        expanded = os.path.expanduser(pattern)
        if glob.has_magic(expanded):
            matches = sorted(glob.glob(expanded, recursive=True))
            if not matches:
                raise ContextError(f"No file matches {pattern!r}; check the pattern.")
            candidates = [Path(m) for m in matches]
        else:
            candidates = [Path(expanded)]
        for path in candidates:
            if path.is_dir():
                found = sorted(
                    p for p in path.rglob("*")
                    if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
                if not found:
                    raise ContextError(f"Directory {str(path)!r} has no files to load.")
                files.extend(found)
            elif path.is_file():
                files.append(path)
            elif path.exists():
                raise ContextError(f"{str(path)!r} is not a regular file.")
            else:
                raise ContextError(f"No such file or directory: {str(path)!r}.")
    return files


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where unknown)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


__all__ = ["available_memory", "expand_paths"]
