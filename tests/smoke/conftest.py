"""The real local model for the smoke tests: SmolLM2-135M served by llama.cpp
on 127.0.0.1 (``rlm_kernel.offline``), started once per session and stopped
at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlm_kernel import offline


@pytest.fixture(scope="session")
def smollm2() -> Iterator[offline.OfflineModel]:
    if not offline.available():
        pytest.fail(f"The smoke tests need the offline model; {offline.INSTALL_HINT}.")
    with offline.OfflineModel() as model:
        yield model

