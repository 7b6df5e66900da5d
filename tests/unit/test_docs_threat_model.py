"""docs/reference/threat-model.md shows each mitigation by a test: every test it names must exist."""

from __future__ import annotations

import re

import pytest

from tests.fixtures.docs_refs import ROOT, CodeRef, code_refs, resolve

THREAT_MODEL = ROOT / "docs" / "reference" / "threat-model.md"


def _test_refs() -> list[CodeRef]:
    return [ref for ref in code_refs(THREAT_MODEL.read_text()) if ref.path.startswith("tests/") and ref.name]


def test_every_threat_names_a_test_or_a_gap() -> None:
    sections = re.split(r"^### ", THREAT_MODEL.read_text(), flags=re.MULTILINE)[1:]
    assert len(sections) >= 10
    for section in sections:
        title = section.splitlines()[0]
        shown = any(ref.path.startswith("tests/") for ref in code_refs(section))
        assert shown or "**Gap" in section or "Not a production concern" in section, title


@pytest.mark.parametrize("ref", _test_refs(), ids=str)
def test_every_test_the_threat_model_names_exists(ref: CodeRef) -> None:
    assert ref.name is not None
    assert ref.name.split(".")[-1].startswith("test_"), f"{ref} is not a test"
    assert resolve(ref) is None, resolve(ref)


@pytest.mark.parametrize(
    "ref", [ref for ref in code_refs(THREAT_MODEL.read_text()) if not ref.path.startswith("tests/")], ids=str
)
def test_every_code_path_the_threat_model_names_exists(ref: CodeRef) -> None:
    assert resolve(ref) is None, resolve(ref)
