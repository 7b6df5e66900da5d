"""The profile summariser: every profiled second lands in exactly one component group."""

from __future__ import annotations

import cProfile
import json
from pathlib import Path

from tests.bench.bench_profile import component_split, group_of


def test_groups_by_file() -> None:
    assert group_of("/x/bridge/slurm/source.py") == "job source"
    assert group_of("/x/bridge/slurmrest/client.py") == "Slurm REST"
    assert group_of("/x/site-packages/structlog/_base.py") == "logging"
    assert group_of("/x/translators/slurm.py") == "translation"
    assert group_of("/x/somewhere.py") == "other"


def test_split_adds_up_to_the_profile(tmp_path: Path) -> None:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        json.loads(json.dumps({"a": list(range(50))}))
    profile.disable()
    path = tmp_path / "p.prof"
    profile.dump_stats(str(path))
    split = component_split(path)
    assert split["by_component_seconds"].get("JSON", 0) > 0
    assert abs(sum(split["by_component_seconds"].values()) - split["profiled_seconds"]) < 0.01
