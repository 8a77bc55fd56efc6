"""Cheap insurance against a poisoned litellm: the exact pinned version, no
``.pth`` start-up hook from it (the malicious 1.82.7 / 1.82.8 releases
planted one) in any site-packages directory of this environment, and the
installed files are exactly those of the wheel whose hash is committed."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import site
import sys
from pathlib import Path

import pytest

PINNED = "1.106.2"


def site_dirs() -> list[Path]:
    dirs = set(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        dirs.add(user)
    dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return sorted(Path(d) for d in dirs if Path(d).is_dir())


def test_site_packages_found():
    assert any(str(d).startswith(sys.prefix) for d in site_dirs())


def test_no_litellm_pth_file():
    found = [str(p) for d in site_dirs() for p in d.glob("*.pth") if p.name.lower().startswith("litellm")]
    assert not found, f"litellm .pth start-up hooks installed: {found}"


def test_no_pth_file_mentions_litellm():
    suspicious = []
    for directory in site_dirs():
        for path in directory.glob("*.pth"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if "litellm" in text.lower():
                suspicious.append(str(path))
    assert not suspicious, f".pth files that mention litellm: {suspicious}"


def test_litellm_is_the_pinned_version():
    assert importlib.metadata.version("litellm") == PINNED


def test_project_pins_litellm_exactly():
    requires = importlib.metadata.requires("rlm-kernel") or []
    assert f"litellm=={PINNED}" in [r.replace(" ", "") for r in requires]


def test_installed_litellm_files_match_its_record():
    # the wheel's RECORD lists every file it installed; nothing extra at top level
    dist = importlib.metadata.distribution("litellm")
    top_level = {str(f).split("/", 1)[0] for f in dist.files or []}
    assert not [t for t in top_level if t.endswith(".pth")], top_level


# -- the hash-checked install (./dev setup: requirements/litellm.txt, then the project) --------

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements"


def record_lines(text: str) -> list[str]:
    """A RECORD as requirements/litellm-record.txt describes it."""
    import csv

    own = (".dist-info/RECORD", ".dist-info/INSTALLER", ".dist-info/REQUESTED", ".dist-info/direct_url.json")
    kept = []
    for row in csv.reader(text.splitlines()):
        if not row:
            continue
        path, digest, size = (row + ["", ""])[:3]
        if "__pycache__" in path or path.startswith("..") or path.endswith(own):
            continue
        kept.append(f"{path},{digest},{size}")
    return sorted(kept)


def test_the_hashed_requirement_pins_the_same_litellm_with_every_file_of_the_release():
    text = (REQUIREMENTS / "litellm.txt").read_text(encoding="utf-8")
    assert f"litellm=={PINNED} " in text
    hashes = re.findall(r"--hash=sha256:([0-9a-f]+)", text)
    assert len(hashes) == len(set(hashes)) == 8 and all(len(h) == 64 for h in hashes)  # 7 wheels and the sdist
    assert "cb1a2a1e55a4a8350ae2167525dc0d06f59b078cd685fb3e0f5419f02da5420e" in hashes  # manylinux x86_64
    dev = (REQUIREMENTS.parent / "dev").read_text(encoding="utf-8")
    checked = re.search(r"pip install .*--no-deps --require-hashes .*-r requirements/litellm\.txt", dev)
    assert checked and checked.start() < dev.index('pip install -q -e ".[')  # before anything else


def test_installed_litellm_is_exactly_the_files_of_the_hashed_wheel():
    dist = importlib.metadata.distribution("litellm")
    tag = re.search(r"^Tag: (\S+)$", dist.read_text("WHEEL") or "", re.M).group(1)
    known = dict(line.split() for line in (REQUIREMENTS / "litellm-record.txt").read_text(encoding="utf-8")
                 .splitlines() if line.strip() and not line.startswith("#"))
    if tag not in known:
        pytest.skip(f"no committed RECORD digest for the {tag} wheel")
    lines = record_lines(dist.read_text("RECORD") or "")
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == known[tag]


def test_installed_litellm_files_match_their_record_hashes():
    dist = importlib.metadata.distribution("litellm")
    changed = []
    for file in dist.files or []:
        if file.hash is None or file.hash.mode != "sha256":
            continue
        data = Path(file.locate()).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if digest != file.hash.value:
            changed.append(str(file))
    assert not changed, f"installed litellm files differ from its RECORD: {changed[:10]}"
