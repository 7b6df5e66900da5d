"""The scontrol fallback: argv lists, the JWT in the environment only, typed errors.

A stand-in ``scontrol`` (a small Python script on disk, run as a real process) records its argv and
the SLURM_JWT it saw, and fails the way the real one does when told to.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bridge.slurmrest import InvalidNodeName, JwtAuth, NodesBusy, ScontrolCli, ScontrolError, StaticToken
from bridge.slurmrest.errors import SlurmUnavailable

FAKE = """#!{python}
import json, os, sys
log = {log!r}
with open(log, "a") as fh:
    fh.write(json.dumps({{"argv": sys.argv[1:], "jwt": os.environ.get("SLURM_JWT")}}) + "\\n")
fail = os.environ.get("FAKE_FAIL", "")
if fail and fail in " ".join(sys.argv[1:]):
    sys.stderr.write(os.environ["FAKE_MESSAGE"] + "\\n")
    sys.exit(1)
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "calls.jsonl"
    script = tmp_path / "scontrol"
    script.write_text(FAKE.format(python=sys.executable, log=str(log)))
    script.chmod(0o755)
    return script, log


def calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def cli(script: Path, **env: str) -> ScontrolCli:
    auth = JwtAuth(user_name="slurm", token=StaticToken("SLURM_JWT=s3cr3t-jwt"))
    return ScontrolCli(auth=auth, scontrol=str(script), env=env, timeout=20)


async def test_argv_and_token(fake: tuple[Path, Path]) -> None:
    script, log = fake
    c = cli(script)
    await c.set_node_state("b42-0", "drain", reason="job 42 done; $(reboot)\n`x`")
    await c.delete_node("b42-0")
    await c.requeue_hold(42)
    seen = calls(log)
    assert [s["argv"] for s in seen] == [
        ["update", "nodename=b42-0", "state=DRAIN", "reason=job 42 done; $(reboot) `x`"],
        ["delete", "nodename=b42-0"],
        ["requeuehold", "42"],
    ]
    assert {s["jwt"] for s in seen} == {"s3cr3t-jwt"}
    assert "s3cr3t" not in repr(c)


async def test_busy_node_is_typed(fake: tuple[Path, Path]) -> None:
    script, _ = fake
    c = cli(script, FAKE_FAIL="delete", FAKE_MESSAGE="Requested nodes are busy")
    with pytest.raises(NodesBusy):
        await c.delete_node("b1")
    c = cli(script, FAKE_FAIL="update", FAKE_MESSAGE="Invalid node name specified")
    with pytest.raises(InvalidNodeName):
        await c.set_node_state("b1", "DOWN", reason="gone")
    c = cli(script, FAKE_FAIL="requeuehold", FAKE_MESSAGE="something else")
    with pytest.raises(ScontrolError, match="something else"):
        await c.requeue_hold(3)


@pytest.mark.parametrize("name", ["b1 state=resume", "b1\nx", "-h", "", "a=b", "n[1-2]"])
async def test_hostile_node_names_never_run(fake: tuple[Path, Path], name: str) -> None:
    script, log = fake
    with pytest.raises(ValueError, match="refusing"):
        await cli(script).delete_node(name)
    with pytest.raises(ValueError, match="refusing"):
        await cli(script).create_future_node(name)
    assert not log.exists()


async def test_a_placeholder_is_created_as_a_future_node(fake: tuple[Path, Path]) -> None:
    script, log = fake
    await cli(script).create_future_node("b42-1")
    assert [s["argv"] for s in calls(log)] == [["create", "NodeName=b42-1", "State=FUTURE"]]


@pytest.mark.parametrize("job_id", ["1;2", "-1", "1 2", ""])
async def test_hostile_job_ids_never_run(fake: tuple[Path, Path], job_id: str) -> None:
    script, log = fake
    with pytest.raises(ValueError, match="refusing"):
        await cli(script).requeue_hold(job_id)
    assert not log.exists()


async def test_missing_binary_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SlurmUnavailable):
        await cli(tmp_path / "nope").requeue_hold(1)
