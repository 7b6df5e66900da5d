"""The docs' diagrams render from their sources with Graphviz, byte for byte as checked in.

An integration test because it runs Graphviz's ``dot`` (``scripts/dev setup`` installs ``graphviz``);
the unit tier checks only the source hash the SVG records (tests/unit/test_docs_architecture.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.sandbox.diagrams import render, sources


@pytest.mark.parametrize("source", sources(), ids=lambda path: path.name)
def test_the_checked_in_svg_is_what_its_source_renders_to(source: Path) -> None:
    assert source.with_suffix(".svg").read_text() == render(source), "stale: run scripts/dev diagrams"
