"""Write the dashboards' JSON (``python -m dashboards``), or check it is current (``--check``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import Dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from .controller import controller_internals
from .fleet import fleet

__all__ = ["DASHBOARDS", "JSON_DIR", "main", "render"]

JSON_DIR = Path(__file__).with_name("json")
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "k8s-bridge-fleet.json": fleet,
    "k8s-bridge-controller.json": controller_internals,
}


def render(build: Callable[[], Dashboard]) -> str:
    """The dashboard as Grafana imports it: stable key order, two-space indent, a final newline."""
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a checked-in file is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        target = JSON_DIR / name
        text = render(build)
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(name)
        else:
            target.write_text(text)
            print(target)
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m dashboards`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
