"""The Slurm program and the shared shell: flags and their environment variables, explain, live config."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from bridge.api.mixing import WorkloadMixingSpec
from bridge.api.slurm_job import JobState, SlurmJob
from bridge.mixing_config import LiveConfig
from bridge.program import DirectPublisher, bind_address, configure_program_logging
from bridge.runtime.client import Client
from bridge.slurm.connection import LiveSlurm, SecretToken, SlurmMixing, jwt_expiry
from bridge.slurm.program import Settings, explain, parse_args
from bridge.slurmrest.client import SlurmClient
from bridge.slurmrest.errors import SlurmAuthError
from bridge.slurmrest.versions import NodesPage
from tests.fixtures.mixing import resource, slurm_spec

FLAGS = [
    "--kubeconfig",
    "--config",
    "--leader-elect",
    "--leader-election-namespace",
    "--leader-election-id",
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--log-level",
    "--max-concurrent-reconciles",
    "--slurm-token-file",
    "--slurm-url",
    "--scontrol",
    "--scontrol-prefix",
]


def test_flags_parse_into_settings() -> None:
    command, s, _ = parse_args(
        [
            "--config", "site", "--kubeconfig", "/k", "--leader-elect", "--leader-election-namespace", "ops",
            "--metrics-bind-address", "127.0.0.1:9090", "--health-probe-bind-address", "0",
            "--max-concurrent-reconciles", "8", "--scontrol-prefix", "chroot '/srv/slurm root'", "-v",
        ]
    )  # fmt: skip
    assert command == "run"
    assert s.config == "site"
    assert s.kubeconfig == "/k"
    assert s.leader_elect
    assert s.leader_election_namespace == "ops"
    assert s.lease_name == "k8s-bridge-slurm-site"
    assert s.max_concurrent_reconciles == 8
    assert s.scontrol_prefix == ("chroot", "/srv/slurm root")
    assert s.log_level == "debug"


def test_every_flag_has_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CONFIG", "from-env")
    monkeypatch.setenv("K8S_BRIDGE_LEADER_ELECT", "true")
    monkeypatch.setenv("K8S_BRIDGE_MAX_CONCURRENT_RECONCILES", "3")
    monkeypatch.setenv("K8S_BRIDGE_METRICS_BIND_ADDRESS", ":9999")
    monkeypatch.setenv("K8S_BRIDGE_SLURM_TOKEN_FILE", "/t")
    monkeypatch.setenv("K8S_BRIDGE_LOG_LEVEL", "warning")
    _, s, _ = parse_args([])
    assert (s.config, s.leader_elect, s.max_concurrent_reconciles) == ("from-env", True, 3)
    assert (s.metrics_bind_address, s.slurm_token_file, s.log_level) == (":9999", "/t", "warning")
    _, s, _ = parse_args(["--config", "flag-wins", "--no-leader-elect"])
    assert (s.config, s.leader_elect) == ("flag-wins", False)


def test_help_documents_every_flag_and_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in text
        assert "K8S_BRIDGE_" + flag.lstrip("-").upper().replace("-", "_") in " ".join(text.split())
    assert "explain" in text


def test_config_is_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("K8S_BRIDGE_CONFIG", raising=False)
    with pytest.raises(SystemExit):
        parse_args([])
    assert "--config" in capsys.readouterr().err


def test_explain_parses_its_job_id() -> None:
    command, s, ns = parse_args(["explain", "42", "--mixing-file", "m.yaml", "--slurm-token-file", "t"])
    assert command == "explain"
    assert ns.job_id == 42
    assert s.slurm_token_file == "t"


def test_bind_addresses() -> None:
    assert bind_address(":8080") == ("0.0.0.0", 8080)
    assert bind_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert bind_address("0") is None
    with pytest.raises(ValueError, match="host:port"):
        bind_address("nonsense")


def test_module_entry_point_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge.slurm", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--leader-elect" in done.stdout


def spec() -> WorkloadMixingSpec:
    return WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})


def test_direct_publisher_publishes_valid_specs_only() -> None:
    live = LiveConfig("site")
    publisher = DirectPublisher(live)
    good = resource({"slurm": slurm_spec()}) | {"metadata": {"name": "site", "uid": "u", "generation": 2}}
    publisher.on_add(good, is_initial_list=True)
    current = live.current
    assert current is not None
    assert current.generation == 2
    bad = good | {"spec": {"slurm": {"url": 3}}, "metadata": {"name": "site", "uid": "u", "generation": 3}}
    publisher.on_update(good, bad)
    assert live.current is not None
    assert live.current.generation == 2
    publisher.on_delete(good)
    assert live.current is None


class SecretClient:
    def __init__(self, token: str) -> None:
        self.token = token
        self.gets = 0

    async def get(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        self.gets += 1
        await asyncio.sleep(0)  # a real GET yields: concurrent callers overlap
        return {"data": {"token": base64.b64encode(self.token.encode()).decode()}}


async def test_secret_token_is_cached_and_reread_after_invalidate() -> None:
    live = LiveConfig("site")
    mixing = SlurmMixing(live)
    client = SecretClient("jwt-1")
    token = SecretToken(cast(Client, client), mixing)
    with pytest.raises(SlurmAuthError):
        await token.get()  # no configuration yet
    live.publish(uid="u", generation=1, spec=spec())
    assert await token.get() == "jwt-1"
    client.token = "jwt-2"
    assert await token.get() == "jwt-1"
    assert client.gets == 1
    token.invalidate()
    assert await token.get() == "jwt-2"


def jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256'})}.{part(claims)}.c2lnbmF0dXJl"


async def test_secret_token_is_read_again_only_when_due() -> None:
    """Kept ``ttl`` seconds, or until shortly before the JWT's ``exp``; concurrent callers share a read."""
    live = LiveConfig("site")
    live.publish(uid="u", generation=1, spec=spec())
    now = [1000.0]
    client = SecretClient(jwt({"exp": 1000 + 3600, "sun": "slurm"}))
    token = SecretToken(
        cast(Client, client), SlurmMixing(live), ttl=300, margin=30, clock=lambda: now[0],
        wall_clock=lambda: now[0],
    )  # fmt: skip
    assert len(set(await asyncio.gather(*(token.get() for _ in range(20))))) == 1
    assert client.gets == 1  # one GET for a burst of callers
    now[0] += 299
    await token.get()
    assert client.gets == 1
    now[0] += 2
    await token.get()
    assert client.gets == 2  # ttl over
    # A token that expires sooner than the ttl is read again before it expires.
    client.token = jwt({"exp": now[0] + 100})
    token.invalidate()
    await token.get()
    now[0] += 69
    await token.get()
    assert client.gets == 3
    now[0] += 2
    await token.get()
    assert client.gets == 4  # 30 s before exp


def test_jwt_expiry_reads_the_claim_or_says_none() -> None:
    assert jwt_expiry(jwt({"exp": 1234})) == 1234.0
    assert jwt_expiry("SLURM_JWT=" + jwt({"exp": 99})) == 99.0
    assert jwt_expiry(jwt({"sun": "slurm"})) is None
    assert jwt_expiry("not-a-jwt") is None
    assert jwt_expiry("a.!!!.c") is None
    assert jwt_expiry(jwt({"exp": True})) is None


async def no_nodes(self: LiveSlurm, *, update_time: int | None = None) -> NodesPage:
    return NodesPage(nodes=(), update_time=None)


async def test_explain_says_what_slurm_waits_for_as_the_bridge_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explain observes through the reconciler's own observer: a dependent job is not bridged there
    either, and an administrator's hold is named as such."""
    mixing = tmp_path / "mixing.yaml"
    mixing.write_text(yaml.safe_dump(resource({"slurm": slurm_spec()})))
    shown: dict[str, Any] = {"dependency": "afterok:41(unfulfilled)", "state_reason": "JobHeldUser"}

    async def get_job(self: LiveSlurm, job_id: int) -> SlurmJob:
        return SlurmJob(
            job_id=job_id, partition="bridge", state=JobState.PENDING, hold=True, node_count=1, cpus=1,
            memory_per_node_mb=500, **shown,
        )  # fmt: skip

    monkeypatch.setattr(LiveSlurm, "get_job", get_job)
    monkeypatch.setattr(LiveSlurm, "list_nodes", no_nodes)
    out = io.StringIO()
    assert await explain(Settings(config="site"), job_id=42, mixing_file=str(mixing), out=out) == 0
    assert (
        "the bridge now: not bridged: it waits for its dependency (afterok:41(unfulfilled))" in out.getvalue()
    )
    shown = {"state_reason": "JobHeldAdmin"}
    out = io.StringIO()
    assert await explain(Settings(config="site"), job_id=42, mixing_file=str(mixing), out=out) == 0
    assert "not bridged: held by an administrator" in out.getvalue()


async def test_explain_prints_the_jobset_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mixing = tmp_path / "mixing.yaml"
    mixing.write_text(yaml.safe_dump(resource({"slurm": slurm_spec()})))

    async def get_job(self: LiveSlurm, job_id: int) -> SlurmJob:
        return SlurmJob(
            job_id=job_id, name="x\n$(id)", partition="bridge", state=JobState.PENDING, hold=True,
            state_reason="JobHeldUser", node_count=2, cpus=2, memory_per_node_mb=500,
        )  # fmt: skip

    monkeypatch.setattr(LiveSlurm, "get_job", get_job)
    monkeypatch.setattr(LiveSlurm, "list_nodes", no_nodes)
    out = io.StringIO()
    code = await explain(Settings(config="site"), job_id=42, mixing_file=str(mixing), out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "servable: JobSet" in text
    assert "why: queue" in text
    assert "the bridge now: creating JobSet slurm-hpc-42" in text
    manifest = yaml.safe_load(text.split("---\n", 1)[1])
    assert manifest["metadata"]["name"] == "slurm-hpc-42"


async def test_explain_says_why_a_job_cannot_be_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mixing = tmp_path / "mixing.yaml"
    mixing.write_text(yaml.safe_dump(resource({"slurm": slurm_spec()})))

    async def get_job(self: LiveSlurm, job_id: int) -> SlurmJob:
        return SlurmJob(
            job_id=job_id, partition="bridge", state=JobState.PENDING, hold=True, node_count=100000
        )

    monkeypatch.setattr(LiveSlurm, "get_job", get_job)
    monkeypatch.setattr(LiveSlurm, "list_nodes", no_nodes)
    out = io.StringIO()
    code = await explain(Settings(config="site"), job_id=7, mixing_file=str(mixing), out=out)
    assert code == 2
    assert "cannot be served (TooManyNodes)" in out.getvalue()


@pytest.mark.usefixtures("restore_logging")
def test_vv_also_logs_the_http_client_libraries() -> None:
    _, once, _ = parse_args(["--config", "site", "-v"])
    _, twice, _ = parse_args(["--config", "site", "-vv"])
    assert (once.log_level, once.verbose, twice.verbose) == ("debug", 1, 2)
    configure_program_logging(once)
    assert logging.getLogger("aiohttp.access").level == logging.WARNING
    configure_program_logging(twice)
    assert logging.getLogger("aiohttp.access").level == logging.DEBUG
    assert logging.getLogger("kubernetes_asyncio").level == logging.DEBUG


async def test_a_new_slurm_connection_does_not_close_the_old_one_under_its_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A WorkloadMixing change of ``spec.slurm.url`` builds a new client; a call still running on the
    old one finishes on it, and only then is the old one closed."""
    closed: list[str] = []

    async def close(self: SlurmClient) -> None:
        closed.append(self.base_url)

    monkeypatch.setattr(SlurmClient, "close", close)
    live = LiveConfig("site")
    live.publish(uid="u", generation=1, spec=WorkloadMixingSpec.model_validate({"slurm": slurm_spec()}))
    slurm = LiveSlurm(config=SlurmMixing(live), token=cast(Any, None), settings=Settings(config="site"))
    gate = asyncio.Event()

    async def slow(client: SlurmClient) -> str:
        await gate.wait()
        assert client.base_url not in closed
        return client.base_url

    first = asyncio.create_task(slurm._call(slow))
    await asyncio.sleep(0)
    old_url = (await slurm.client()).base_url
    moved = slurm_spec() | {"url": "http://elsewhere:6820"}
    live.publish(uid="u", generation=2, spec=WorkloadMixingSpec.model_validate({"slurm": moved}))
    new = await slurm.client()
    assert new.base_url != old_url
    assert closed == []  # the first call still runs on the old client
    gate.set()
    assert await first == old_url
    assert closed == [old_url]
    await slurm.close()
    assert closed == [old_url, new.base_url]
