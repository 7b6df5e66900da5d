"""The chart and the images run ``k8s-bridge`` and ``ray-bridge``: each must name the bridge's main,
and the programs' usage and help name the command they were run as."""

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from bridge.program import program_name

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize(
    ("command", "module"), [("k8s-bridge", "bridge.slurm"), ("ray-bridge", "bridge.ray")]
)
def test_console_script_is_the_bridge_main(command: str, module: str) -> None:
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    target_module, _, attr = scripts[command].partition(":")
    target = getattr(importlib.import_module(target_module), attr)
    assert target is importlib.import_module(f"{module}.__main__").main


@pytest.mark.parametrize(
    ("argv0", "module", "want"),
    [
        ("/usr/local/bin/k8s-bridge", "bridge.slurm", "k8s-bridge"),
        ("ray-bridge", "bridge.ray", "ray-bridge"),
        ("/work/bridge/slurm/__main__.py", "bridge.slurm", "python -m bridge.slurm"),
        ("", "bridge.ray", "python -m bridge.ray"),
    ],
)
def test_the_program_is_named_as_it_was_run(argv0: str, module: str, want: str) -> None:
    assert program_name(argv0, module=module) == want


@pytest.mark.parametrize(
    ("command", "module"), [("k8s-bridge", "bridge.slurm"), ("ray-bridge", "bridge.ray")]
)
def test_help_names_the_console_script_it_was_run_as(
    command: str, module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [f"/opt/venv/bin/{command}", "--help"])
    main = importlib.import_module(f"{module}.program").main
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {command} ")
    assert f"'{command} explain " in " ".join(out.split())
    assert "python -m" not in out
