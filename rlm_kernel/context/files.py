"""Loading the context from files: one file gives a str, several files (a
directory, a glob, several paths) give a list of str in path order."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ContextError

_SNIFF = 8192


@dataclass
class LoadedContext:
    value: str | list[str]
    sources: list[str] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def chars(self) -> int:
        if isinstance(self.value, str):
            return len(self.value)
        return sum(len(part) for part in self.value)


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


def load_context(patterns: list[str], encoding: str = "utf-8", skip_binary: bool | None = None) -> LoadedContext:
    """Load text files as the context. Refuses binary files, undecodable
    text (naming the encoding tried) and inputs larger than free memory
    before reading them."""
    if not patterns:
        raise ContextError("Give at least one path to load as the context.")
    files = expand_paths(patterns)
    # A directory may hold a few binary files (images, archives); skip those
    # rather than refuse the whole directory, but never a file named directly.
    named_directly = {Path(os.path.expanduser(p)) for p in patterns if not glob.has_magic(p)}
    total = sum(f.stat().st_size for f in files)
    available = available_memory()
    if available is not None and total * 1.3 > available:
        raise ContextError(
            f"The context is {total / 1e9:.1f} GB but only {available / 1e9:.1f} GB of memory is free; "
            "load a part of it or free memory first."
        )
    texts: list[str] = []
    sources: list[str] = []
    for path in files:
        text = _read_text(path, encoding, skippable=path not in named_directly and skip_binary is not False)
        if text is None:
            continue
        texts.append(text)
        sources.append(str(path))
    if not texts:
        where = ", ".join(repr(p) for p in patterns[:3])
        raise ContextError(
            f"{where} {'holds' if len(patterns) == 1 else 'hold'} no text files: all {len(files):,} "
            f"{'file looks' if len(files) == 1 else 'files look'} binary; give text files (or a folder of them)."
        )
    if all(not t for t in texts):
        names = ", ".join(sources[:3])
        raise ContextError(f"The context would be empty: {names} {'is' if len(sources) == 1 else 'are'} empty.")
    value: str | list[str] = texts[0] if len(texts) == 1 and len(files) == 1 else texts
    return LoadedContext(value=value, sources=sources, encoding=encoding)


def _read_text(path: Path, encoding: str, skippable: bool) -> str | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF)
            if b"\x00" in head and encoding.lower().replace("-", "") not in ("utf16", "utf32"):
                if skippable:
                    return None
                raise ContextError(f"{str(path)!r} looks binary (it contains NUL bytes); give a text file.")
            handle.seek(0)
            data = handle.read()  # one read: no second full-size copy
    except PermissionError:
        raise ContextError(f"Permission denied reading {str(path)!r}.") from None
    except OSError as error:
        raise ContextError(f"Cannot read {str(path)!r}: {error.strerror or error}.") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise ContextError(
            f"{str(path)!r} is not valid {encoding} (byte 0x{data[error.start]:02x} at offset {error.start:,}); "
            "pass --encoding with the file's encoding, e.g. --encoding latin-1."
        ) from None
    except LookupError:
        raise ContextError(f"Unknown encoding {encoding!r}; use a Python codec name such as utf-8 or latin-1.") from None


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
