"""Fixtures of the trainer-face tests (they run in .venv-faces: ../test_faces.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from screens import Served


@pytest.fixture(scope="module")
def openenv_url(address: str) -> Iterator[str]:
    s = Served(address)
    yield s.url
    s.stop()
