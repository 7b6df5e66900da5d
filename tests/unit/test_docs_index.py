"""The ADR index lists every ADR, and the README's first commands are the two CI runs."""

from __future__ import annotations

import re

from tests.fixtures.docs_refs import ROOT

ADRS = ROOT / "docs" / "adr"


def test_the_adr_index_lists_every_adr_and_only_those() -> None:
    listed = set(re.findall(r"\]\((\d{4}-[\w-]+\.md)\)", (ADRS / "README.md").read_text()))
    present = {path.name for path in ADRS.glob("[0-9][0-9][0-9][0-9]-*.md")}
    assert listed == present


def test_the_readme_starts_with_the_two_commands_and_links_what_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert first_block[0].startswith("scripts/dev sandbox ")
    assert first_block[1].startswith("scripts/dev test ")
    for target in re.findall(r"\]\(((?:docs|charts)/[^)#]+)\)", readme):
        assert (ROOT / target).exists(), target
