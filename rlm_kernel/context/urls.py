"""``http(s)://`` inputs, fetched with httpx (redirects followed, a time
limit, a size limit) and converted by what they are: a web page reduced
to its main text, a PDF or any other kind we load."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import ContextError
from .kinds import kind_of_name

MAX_BYTES = 200 * 2**20
TIMEOUT_S = 30.0
_TYPES = {"text/html": "html", "application/xhtml+xml": "html", "application/pdf": "pdf", "text/csv": "csv",
          "text/tab-separated-values": "tsv", "application/json": "json", "text/markdown": "markdown",
          "text/plain": "text", "image/png": "image", "image/jpeg": "image", "image/webp": "image",
          "application/epub+zip": "epub"}


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def fetch(url: str, timeout: float = TIMEOUT_S) -> tuple[bytes, str]:
    """The body at ``url`` and its kind; a failure is one sentence."""
    import httpx

    try:
        with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(timeout),
                          headers={"User-Agent": "rlm-kernel (loading a context)"}) as client:
            with client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise ContextError(f"{url} answered HTTP {response.status_code} "
                                       f"{response.reason_phrase}; check the address.")
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_BYTES:
                        raise ContextError(f"{url} is larger than {MAX_BYTES // 2**20} MiB; download it and load "
                                           "the file.")
                    chunks.append(chunk)
                kind = kind_of(url, response.headers.get("content-type", ""))
    except httpx.TimeoutException:
        raise ContextError(f"{url} did not answer within {timeout:g} s; try again later or download it.") from None
    except httpx.HTTPError as error:
        raise ContextError(f"Cannot reach {url} ({type(error).__name__}: {error}).") from None
    return b"".join(chunks), kind


def kind_of(url: str, content_type: str) -> str:
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in _TYPES:
        return _TYPES[mime]
    return kind_of_name(unquote(urlsplit(url).path)) or "html"


def fetch_and_convert(url: str, encoding: str, timeout: float) -> Any:
    from .convert import convert, decode_text
    from .kinds import TEXT, installed

    data, kind = fetch(url, timeout)
    if kind in TEXT or (kind in ("html", "csv", "tsv") and not installed(kind)):
        return decode_text(data, url, kind, encoding)
    entry = convert(kind, data, url, encoding, url=url)
    return entry


__all__ = ["fetch", "fetch_and_convert", "is_url"]
