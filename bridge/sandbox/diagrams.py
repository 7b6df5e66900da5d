"""``python -m bridge.sandbox.diagrams``: render the docs' diagrams from their checked-in text sources.

Why a generator and a stamp: a picture checked in as an image drifts from the system the moment
someone edits the source and forgets the image (or edits neither). Each ``docs/diagrams/<name>.dot``
is rendered with Graphviz ``dot`` (Debian's package ``graphviz``, installed by ``scripts/dev setup``)
to ``<name>.svg`` beside it, and the SVG carries the SHA-256 of the source it was made from in a
comment. A unit test compares that stamp with the source (no Graphviz needed); an integration test
renders again and compares the bytes. ``--check`` does the latter from a shell.

Standard library only, like :mod:`bridge.sandbox.build`.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DIAGRAMS", "render", "source_digest", "sources", "stamped_digest"]

DIAGRAMS = Path(__file__).resolve().parents[2] / "docs" / "diagrams"
_STAMP = "<!-- source sha256: {digest} (python -m bridge.sandbox.diagrams) -->"
_STAMP_RE = re.compile(r"<!-- source sha256: ([0-9a-f]{64}) ")


def sources(folder: Path = DIAGRAMS) -> list[Path]:
    """Every diagram source in ``folder``, sorted."""
    return sorted(folder.glob("*.dot"))


def source_digest(source: Path) -> str:
    """The SHA-256 of a diagram source, as the rendered image records it."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def stamped_digest(svg_text: str) -> str | None:
    """The source digest a rendered SVG records, or None if it carries no stamp."""
    found = _STAMP_RE.search(svg_text)
    return found.group(1) if found else None


def render(source: Path) -> str:
    """The SVG of ``source`` with its stamp after the XML declaration; raises if ``dot`` fails."""
    dot = shutil.which("dot")
    if dot is None:
        raise FileNotFoundError("Graphviz 'dot' is not installed: apt-get install graphviz")
    done = subprocess.run([dot, "-Tsvg", str(source)], check=True, capture_output=True, text=True)
    head, sep, rest = done.stdout.partition("?>\n")
    stamp = _STAMP.format(digest=source_digest(source))
    return f"{head}{sep}{stamp}\n{rest}" if sep else f"{stamp}\n{done.stdout}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.sandbox.diagrams", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="fail if a checked-in SVG differs from a fresh render"
    )
    args = parser.parse_args(argv)
    stale = []
    for source in sources():
        target = source.with_suffix(".svg")
        fresh = render(source)
        if args.check:
            if not target.exists() or target.read_text() != fresh:
                stale.append(target.name)
            continue
        target.write_text(fresh)
        print(f"rendered {target.relative_to(DIAGRAMS.parents[1])}")
    if stale:
        print(f"stale (run scripts/dev diagrams): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
