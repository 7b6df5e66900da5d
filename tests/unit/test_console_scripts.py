"""The chart and the images run ``k8s-bridge`` and ``ray-bridge``: each must name the bridge's main."""

import importlib
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize(
    ("command", "module"), [("k8s-bridge", "bridge.slurm"), ("ray-bridge", "bridge.ray")]
)
def test_console_script_is_the_bridge_main(command: str, module: str) -> None:
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    target_module, _, attr = scripts[command].partition(":")
    target = getattr(importlib.import_module(target_module), attr)
    assert target is importlib.import_module(f"{module}.__main__").main
