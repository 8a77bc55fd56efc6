"""Memory figures from /proc (Linux; no psutil needed)."""

from __future__ import annotations

import resource


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """Resident memory of this process now."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def hwm_bytes() -> int | None:
    """Peak resident memory since start or the last :func:`reset_peak`."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so a phase's own peak
    can be read; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mem_available_bytes() -> int | None:
    from ..context.files import available_memory

    return available_memory()
