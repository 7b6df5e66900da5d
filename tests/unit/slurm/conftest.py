"""Fixtures of the slurm unit tests: the real REST responses and OpenAPI documents, copied here
from the reference (public test data) so that the tests do not depend on anything outside."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def reference() -> Callable[[str], Any]:
    """Load one real REST response by file name."""

    def load(name: str) -> Any:
        return json.loads((DATA / name).read_text(encoding="utf-8"))

    return load


@pytest.fixture
def openapi() -> Callable[[str], Any]:
    """Load one OpenAPI document by its reference file name (stored gzipped)."""

    def load(name: str) -> Any:
        with gzip.open(DATA / "openapi" / f"{name}.gz", "rt", encoding="utf-8") as fh:
            return json.load(fh)

    return load
