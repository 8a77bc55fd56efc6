"""Cheap insurance against a poisoned litellm: the exact pinned version, and
no ``.pth`` start-up hook from it (the malicious 1.82.7 / 1.82.8 releases
planted one) in any site-packages directory of this environment."""

from __future__ import annotations

import importlib.metadata
import site
import sys
from pathlib import Path

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
