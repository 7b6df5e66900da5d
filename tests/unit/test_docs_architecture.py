"""docs/architecture.md names code and shows a picture: the names must exist, the picture be current."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.sandbox.diagrams import DIAGRAMS, source_digest, sources, stamped_digest
from tests.fixtures.docs_refs import ROOT, CodeRef, code_refs, resolve

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The "how to add a third bridge" section names the files of a bridge that does not exist: "x".
HYPOTHETICAL = {"x", "x.py"}


def _real_refs() -> list[CodeRef]:
    return [ref for ref in code_refs(ARCHITECTURE.read_text()) if not HYPOTHETICAL & set(ref.path.split("/"))]


def test_the_architecture_names_code() -> None:
    refs = _real_refs()
    assert len([ref for ref in refs if ref.name]) >= 40, refs


@pytest.mark.parametrize("ref", _real_refs(), ids=str)
def test_every_code_path_the_architecture_names_exists(ref: CodeRef) -> None:
    assert resolve(ref) is None, resolve(ref)


def test_the_resolver_can_fail(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("class A:\n    def f(self): ...\nB = 1\n")
    assert resolve(CodeRef("m.py", "A.f"), root=tmp_path) is None
    assert resolve(CodeRef("m.py", "B"), root=tmp_path) is None
    assert resolve(CodeRef("m.py", "A.g"), root=tmp_path) is not None
    assert resolve(CodeRef("n.py", None), root=tmp_path) is not None
    assert code_refs("`a/b.py::C.d` and `e.py`") == [CodeRef("a/b.py", "C.d"), CodeRef("e.py", None)]


def test_the_picture_is_embedded_and_rendered_from_its_current_source() -> None:
    assert "](diagrams/architecture.svg)" in ARCHITECTURE.read_text()
    found = sources()
    assert DIAGRAMS / "architecture.dot" in found
    for source in found:
        svg = source.with_suffix(".svg")
        assert svg.is_file(), f"{svg.name} missing: run scripts/dev diagrams"
        assert stamped_digest(svg.read_text()) == source_digest(source), (
            f"{svg.name} was rendered from another {source.name}: run scripts/dev diagrams"
        )
