"""The client against a scripted slurmrestd on a real local socket.

The server answers what the test scripts (real response bodies where they exist) and records
every request, so version detection, 304 polling, error mapping, request bodies and auth headers
are checked on the wire. The real slurmrestd runs in tests/integration.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge.slurmrest import (
    FileToken,
    InvalidFeature,
    InvalidNodeName,
    JwtAuth,
    NodesBusy,
    NotModified,
    ScontrolCli,
    SlurmAuthError,
    SlurmClient,
    SlurmServerError,
    SlurmUnavailable,
    SlurmUnsupported,
    SlurmVersionError,
    StaticToken,
)
from bridge.slurmrest.cli import _classify
from bridge.slurmrest.errors import JobAlreadyDone

DATA = Path(__file__).parent / "data"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.secret-token-value"


def ref(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


Reply = Callable[[], web.Response]


@dataclass
class Scripted:
    """A slurmrestd stand-in: (method, path) -> queue of replies; unknown URLs get 404."""

    url: str = ""
    routes: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.routes.setdefault((method, path), []).extend(replies)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.seen.append(
            Seen(
                request.method,
                request.path,
                dict(request.query),
                dict(request.headers),
                json.loads(raw) if raw else None,
            )
        )
        queue = self.routes.get((request.method, request.path))
        if not queue:
            return web.Response(status=404, text="Unable to find requested URL endpoint")
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        return reply()


def ok(body: Any, status: int = 200, **headers: str) -> Reply:
    return lambda: web.json_response(body, status=status, headers=headers)


def raw(status: int, text: str | None = None) -> Reply:
    return lambda: web.Response(status=status, text=text)


def empty(errors: list[dict[str, Any]] | None = None, status: int = 200) -> Reply:
    return ok({"meta": {}, "errors": errors or [], "warnings": []}, status=status)


def openapi_paths(*versions: str) -> Reply:
    return ok({"openapi": "3.0.3", "paths": {f"/slurm/{v}/jobs/": {} for v in versions}})


@pytest.fixture
async def server() -> AsyncIterator[Scripted]:
    scripted = Scripted()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    scripted.url = f"http://127.0.0.1:{port}"
    yield scripted
    await runner.cleanup()


def client(server: Scripted, **kwargs: Any) -> SlurmClient:
    auth = JwtAuth(user_name="slurm", token=StaticToken(TOKEN))
    return SlurmClient(server.url, auth=auth, timeout=5, **kwargs)


async def test_detects_newest_version_from_openapi(server: Scripted) -> None:
    server.on("GET", "/openapi/v3", openapi_paths("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.39"))
    server.on(
        "GET", "/slurm/v0.0.42/ping/", ok({"pings": [{"hostname": "c", "responding": True, "latency": 9}]})
    )
    async with client(server) as slurm:
        (ping,) = await slurm.ping()
        assert slurm.rest_version == "v0.0.42"
        assert ping.responding
        assert ping.latency_us == 9
        await slurm.ping()
    assert [s.path for s in server.seen].count("/openapi/v3") == 1  # cached


async def test_detects_by_ping_without_openapi(server: Scripted) -> None:
    server.on("GET", "/slurm/v0.0.38/ping", ok({"pings": [{"hostname": "c", "ping": "UP"}], "errors": []}))
    async with client(server) as slurm:
        (ping,) = await slurm.ping()
        assert slurm.rest_version == "v0.0.38"
        assert ping.responding
    tried = [s.path for s in server.seen]
    assert tried[:3] == ["/openapi/v3", "/slurm/v0.0.45/ping/", "/slurm/v0.0.44/ping/"]


async def test_no_supported_version(server: Scripted) -> None:
    server.on("GET", "/openapi/v3", openapi_paths("v0.0.37", "v0.0.39"))
    async with client(server) as slurm:
        with pytest.raises(SlurmVersionError, match=r"v0\.0\.39"):
            await slurm.ping()


async def test_poll_with_update_time_and_304(server: Scripted) -> None:
    held = ref("rest-24.11-jobs-held-v0.0.42.json")
    server.on("GET", "/slurm/v0.0.42/jobs/", ok(held), raw(304))
    async with client(server, version="v0.0.42") as slurm:
        page = await slurm.poll_jobs()
        assert page is not None
        assert page.update_time == 1796035547
        assert [j.job_id for j in page.jobs] == [1]
        assert await slurm.poll_jobs() is None
        with pytest.raises(NotModified):
            await slurm.list_jobs(update_time=1796035547)
    assert server.seen[0].query == {}
    assert server.seen[1].query == {"update_time": "1796035547"}


async def test_data_parser_no_change_answer_is_not_modified(
    server: Scripted, caplog: pytest.LogCaptureFixture
) -> None:
    # what 24.11 (v0.0.42) really answers when nothing changed: 200, no jobs, last_update 0
    unchanged = {
        "jobs": [],
        "last_backfill": {"set": True, "infinite": False, "number": 0},
        "last_update": {"set": True, "infinite": False, "number": 0},
        "errors": [],
        "warnings": [
            {"description": "No job changes since update_time[1796039405]", "source": "op_handler_jobs"}
        ],
    }
    server.on("GET", "/slurm/v0.0.42/jobs/", ok(unchanged))
    server.on("GET", "/slurm/v0.0.42/nodes/", raw(304))
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(NotModified):
            await slurm.list_jobs(update_time=1796039405)
        with pytest.raises(NotModified):
            await slurm.list_nodes(update_time=1796039405)
    assert "No job changes" not in [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_v0038_empty_list_is_not_mistaken_for_no_change(server: Scripted) -> None:
    server.on("GET", "/slurm/v0.0.38/jobs", ok({"jobs": [], "errors": []}))
    async with client(server, version="v0.0.38") as slurm:
        page = await slurm.list_jobs(update_time=5)
    assert page.jobs == ()
    assert page.update_time is not None


async def test_v0038_update_time_comes_from_date_header(server: Scripted) -> None:
    body = ref("rest-v0.0.38-job17.json")
    server.on("GET", "/slurm/v0.0.38/jobs", ok(body, Date="Tue, 15 Nov 1994 08:12:31 GMT"))
    async with client(server, version="v0.0.38") as slurm:
        page = await slurm.list_jobs()
    assert page.update_time == 784887151 - 2  # the server's clock, minus the margin
    assert page.jobs[0].job_id == 17


async def test_errors_in_a_200_answer_are_typed(server: Scripted, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    entry = {
        "description": "Invalid node name specified",
        "error_number": 2018,
        "error": "x",
        "source": "slurm_update_job",
    }
    server.on(
        "POST",
        "/slurm/v0.0.42/job/5",
        ok({"errors": [entry], "warnings": [{"description": "Ignoring unknown field", "source": "job"}]}),
    )
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(InvalidNodeName) as info:
            await slurm.pin_and_release(5, nodes=["b5-0"], constraints="bridge-job-5")
    err = info.value
    assert (err.error_number, err.source, err.status) == (2018, "slurm_update_job", 200)
    assert "Invalid node name" in str(err)
    assert "Ignoring unknown field" in caplog.text
    assert TOKEN not in caplog.text


async def test_v0038_error_shape(server: Scripted) -> None:
    server.on(
        "POST",
        "/slurm/v0.0.38/job/5",
        ok({"errors": [{"error": "Invalid feature specification", "error_number": 2029}]}),
    )
    async with client(server, version="v0.0.38") as slurm:
        with pytest.raises(InvalidFeature, match="Invalid feature"):
            await slurm.pin_and_release(5, nodes=["b5-0"], constraints="bridge-job-5")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (raw(500, "Authentication failure"), SlurmAuthError),
        (raw(401), SlurmAuthError),
        (
            ok({"errors": [{"error_number": 1007, "description": "Protocol authentication error"}]}, 511),
            SlurmAuthError,
        ),
        (raw(500), SlurmServerError),
        (raw(502, "bad gateway"), SlurmServerError),
    ],
)
async def test_http_failures(server: Scripted, reply: Reply, expected: type[Exception]) -> None:
    server.on("GET", "/slurm/v0.0.42/jobs/", reply)
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(expected) as info:
            await slurm.list_jobs()
    assert TOKEN not in str(info.value)


async def test_connection_refused_and_observer() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    calls: list[tuple[str, str, int | None, float]] = []
    slurm = SlurmClient(f"http://127.0.0.1:{port}", version="v0.0.42", observer=lambda *a: calls.append(a))
    async with slurm:
        with pytest.raises(SlurmUnavailable):
            await slurm.get_job(3)
    assert calls[0][:3] == ("GET", "/slurm/v0.0.42/job/{job_id}", None)


async def test_observer_sees_templates_and_status(server: Scripted) -> None:
    server.on("GET", "/slurm/v0.0.42/job/3", ok(ref("rest-24.11-job2-requeuehold-v0.0.42.json")))
    calls: list[tuple[str, str, int | None, float]] = []
    async with client(server, version="v0.0.42", observer=lambda *a: calls.append(a)) as slurm:
        job = await slurm.get_job(3)
    assert job.job_id == 2  # the only entry returned
    assert calls[0][:3] == ("GET", "/slurm/v0.0.42/job/{job_id}", 200)
    assert calls[0][3] >= 0


@pytest.mark.parametrize(
    ("version", "path", "expected"),
    [
        (
            "v0.0.38",
            "/slurm/v0.0.38/job/42",
            {"nodelist": "b42-0,b42-1", "constraints": "bridge-job-42", "hold": False},
        ),
        (
            "v0.0.42",
            "/slurm/v0.0.42/job/42",
            {"required_nodes": ["b42-0", "b42-1"], "constraints": "bridge-job-42", "hold": False},
        ),
        (
            "v0.0.45",
            "/slurm/v0.0.45/job/42",
            {"required_nodes": ["b42-0", "b42-1"], "constraints": "bridge-job-42", "hold": False},
        ),
    ],
)
async def test_pin_and_release_is_one_call(server: Scripted, version: str, path: str, expected: Any) -> None:
    server.on("POST", path, empty())
    async with client(server, version=version) as slurm:
        await slurm.pin_and_release(42, nodes=["b42-0", "b42-1"], constraints="bridge-job-42")
    (seen,) = server.seen
    assert seen.body == expected
    assert seen.headers["X-SLURM-USER-NAME"] == "slurm"
    assert seen.headers["X-SLURM-USER-TOKEN"] == TOKEN


async def test_release_after_requeuehold_sets_begin_time(server: Scripted) -> None:
    server.on("POST", "/slurm/v0.0.42/job/2", empty())
    async with client(server, version="v0.0.42") as slurm:
        await slurm.pin_and_release(2, nodes=["dyn1"], constraints="bridge-job-2", begin_time=1796035700)
        await slurm.set_comment(2, 'k8s-bridge: needs 100000 nodes; "quoted" $(x)')
        await slurm.hold_job(2)
    assert server.seen[0].body["begin_time"] == {"set": True, "infinite": False, "number": 1796035700}
    assert server.seen[1].body == {"comment": 'k8s-bridge: needs 100000 nodes; "quoted" $(x)'}
    assert server.seen[2].body == {"hold": True}


async def test_drain_and_delete_busy_node_over_rest(server: Scripted) -> None:
    busy = {"error_number": 2016, "description": "Requested nodes are busy", "source": "slurm_delete_node"}
    server.on("POST", "/slurm/v0.0.42/node/b42-0", empty())
    server.on("DELETE", "/slurm/v0.0.42/node/b42-0", empty([busy], status=500), empty())
    async with client(server, version="v0.0.42") as slurm:
        await slurm.drain_node("b42-0", reason="job 42 finished")
        await slurm.delete_node("b42-0")
        server.on("DELETE", "/slurm/v0.0.42/node/b42-1", empty([busy], status=500))
        with pytest.raises(NodesBusy):
            await slurm.delete_node("b42-1", down_if_busy=False)
    steps = [(s.method, s.path, s.body) for s in server.seen]
    assert steps[:4] == [
        ("POST", "/slurm/v0.0.42/node/b42-0", {"state": ["DRAIN"], "reason": "job 42 finished"}),
        ("DELETE", "/slurm/v0.0.42/node/b42-0", None),
        ("POST", "/slurm/v0.0.42/node/b42-0", {"state": ["DOWN"], "reason": "k8s-bridge: delete"}),
        ("DELETE", "/slurm/v0.0.42/node/b42-0", None),
    ]


async def test_deleted_node_lookup_is_invalid_node_name(server: Scripted) -> None:
    gone = {"error_number": 2018, "description": "Invalid node name specified", "source": "slurm_load_node"}
    server.on("GET", "/slurm/v0.0.42/node/dyn1", ok({"nodes": [], "errors": [gone]}))
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(InvalidNodeName):
            await slurm.get_node("dyn1")


async def test_2411_deleted_node_lookup(server: Scripted) -> None:
    entry = {"description": "Failure to query node c1-0", "error_number": 0, "source": "_dump_nodes"}
    server.on("GET", "/slurm/v0.0.42/node/c1-0", ok({"nodes": [], "errors": [entry], "warnings": []}))
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(InvalidNodeName, match="Failure to query node"):
            await slurm.get_node("c1-0")


async def test_v0038_error_known_only_by_its_text(server: Scripted) -> None:
    # 22.05, GET of a deleted node: HTTP 500 with number 0 and Slurm's text
    entry = {"error": "Invalid node name specified", "error_number": 0}
    server.on("GET", "/slurm/v0.0.38/node/dyn1", ok({"nodes": [], "errors": [entry]}, status=500))
    async with client(server, version="v0.0.38") as slurm:
        with pytest.raises(InvalidNodeName) as info:
            await slurm.get_node("dyn1")
    assert info.value.error_number == 2018
    assert info.value.status == 500


@pytest.mark.parametrize(
    "entry",
    [
        {"error": "Job has already finished", "error_number": 2084},
        {"error": "Job has already finished", "error_number": 0},
    ],
)
async def test_an_update_of_a_job_that_has_finished_is_job_already_done(
    server: Scripted, entry: dict[str, Any]
) -> None:
    """22.05's answer to a hold or comment of a job cancelled since the last poll."""
    server.on("POST", "/slurm/v0.0.38/job/7", ok({"errors": [entry]}, status=500))
    async with client(server, version="v0.0.38") as slurm:
        with pytest.raises(JobAlreadyDone):
            await slurm.set_comment(7, "queued")


class RecordingCli(ScontrolCli):
    def __init__(self) -> None:
        super().__init__(auth=None)
        self.calls: list[tuple[str, ...]] = []

    async def run(self, *args: str) -> str:
        self.calls.append(args)
        return ""


async def test_v0038_node_operations_need_scontrol(server: Scripted) -> None:
    async with client(server, version="v0.0.38") as slurm:
        with pytest.raises(SlurmUnsupported):
            await slurm.drain_node("b1", reason="done")
        with pytest.raises(SlurmUnsupported):
            await slurm.requeue_hold(7)
    cli = RecordingCli()
    async with client(server, version="v0.0.38", scontrol=cli) as slurm:
        await slurm.drain_node("b1", reason="done\nnow")
        await slurm.delete_node("b1")
        await slurm.requeue_hold(7)
    assert cli.calls == [
        ("update", "nodename=b1", "state=DRAIN", "reason=done now"),
        ("delete", "nodename=b1"),
        ("requeuehold", "7"),
    ]
    assert server.seen == []


async def test_requeue_hold_over_rest_from_v0045(server: Scripted) -> None:
    server.on("GET", "/slurm/v0.0.45/job/7/requeue", empty())
    async with client(server, version="v0.0.45") as slurm:
        await slurm.requeue_hold(7)
    assert server.seen[0].query == {"Hold": ""}


# --- holding a job pinned to deleted nodes ---------------------------------------------------------

STALE_PIN = {
    "error_number": 2018,
    "description": "Job update requested failed",
    "source": "slurm_update_job2()",
}
NODE_GONE = {"description": "Failure to query node", "error_number": 0, "source": "_dump_nodes"}


def node_answer(name: str) -> Reply:
    body = ref("rest-24.11-nodes-dyn1-v0.0.42.json")
    body["nodes"][0]["name"] = name
    return ok(body)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("v0.0.38", {"hold": True, "nodelist": ""}), ("v0.0.42", {"hold": True, "required_nodes": [""]})],
)
async def test_holding_the_bridges_release_clears_its_pin_in_the_same_call(
    server: Scripted, version: str, expected: Any
) -> None:
    server.on("POST", f"/slurm/{version}/job/42", empty())
    server.on("POST", f"/slurm/{version}/job/43", empty())
    async with client(server, version=version, scontrol=RecordingCli()) as slurm:
        await slurm.hold_job(42, unpin=["b42-0", "b42-1"])
        await slurm.hold_job(43)  # anyone else's job: the hold alone
    assert [s.body for s in server.seen] == [expected, {"hold": True}]


async def test_a_hold_refused_for_deleted_pinned_nodes_lands_through_future_placeholders(
    server: Scripted,
) -> None:
    """24.11 resolves the stored node list before reading the update: 2018 whatever the body. The
    deleted name (b42-1) stands in as a FUTURE node for the update; the known one (b42-0) is left
    alone (creating a known name makes 24.11.5 lose that node)."""
    server.on("POST", "/slurm/v0.0.42/job/42", empty([STALE_PIN], status=500), empty())
    server.on("GET", "/slurm/v0.0.42/node/b42-0", node_answer("b42-0"))
    server.on("GET", "/slurm/v0.0.42/node/b42-1", ok({"nodes": [], "errors": [NODE_GONE], "warnings": []}))
    server.on("DELETE", "/slurm/v0.0.42/node/b42-1", empty())
    cli = RecordingCli()
    async with client(server, version="v0.0.42", scontrol=cli) as slurm:
        await slurm.hold_job(42, unpin=["b42-0", "b42-1"])
    assert [(s.method, s.path, s.body) for s in server.seen] == [
        ("POST", "/slurm/v0.0.42/job/42", {"hold": True, "required_nodes": [""]}),
        ("GET", "/slurm/v0.0.42/node/b42-0", None),
        ("GET", "/slurm/v0.0.42/node/b42-1", None),
        ("POST", "/slurm/v0.0.42/job/42", {"hold": True, "required_nodes": [""]}),
        ("DELETE", "/slurm/v0.0.42/node/b42-1", None),
    ]
    assert server.seen[1].query == {"flags": "FUTURE"}  # a FUTURE node is hidden from a plain GET
    assert cli.calls == [("create", "NodeName=b42-1", "State=FUTURE")]


async def test_placeholders_go_even_when_the_update_through_them_fails(server: Scripted) -> None:
    server.on("POST", "/slurm/v0.0.42/job/42", empty([STALE_PIN], status=500))
    server.on("GET", "/slurm/v0.0.42/node/b42-0", ok({"nodes": [], "errors": [NODE_GONE], "warnings": []}))
    server.on("DELETE", "/slurm/v0.0.42/node/b42-0", empty())
    async with client(server, version="v0.0.42", scontrol=RecordingCli()) as slurm:
        with pytest.raises(InvalidNodeName):
            await slurm.hold_job(42, unpin=["b42-0"])
    assert server.seen[-1].method == "DELETE"


async def test_a_placeholder_that_cannot_be_deleted_is_named_and_the_hold_stands(
    server: Scripted, caplog: pytest.LogCaptureFixture
) -> None:
    server.on("POST", "/slurm/v0.0.42/job/42", empty([STALE_PIN], status=500), empty())
    server.on("GET", "/slurm/v0.0.42/node/b42-0", ok({"nodes": [], "errors": [NODE_GONE], "warnings": []}))
    server.on("DELETE", "/slurm/v0.0.42/node/b42-0", raw(502, "bad gateway"))
    with caplog.at_level(logging.WARNING, logger="bridge.slurmrest.client"):
        async with client(server, version="v0.0.42", scontrol=RecordingCli()) as slurm:
            await slurm.hold_job(42, unpin=["b42-0"])
    assert "placeholder node b42-0 of job 42 left behind" in caplog.text


async def test_no_placeholder_without_the_bridges_own_pin_or_without_scontrol(server: Scripted) -> None:
    server.on("POST", "/slurm/v0.0.42/job/42", empty([STALE_PIN], status=500))
    server.on("GET", "/slurm/v0.0.42/node/b42-0", node_answer("b42-0"))
    cli = RecordingCli()
    async with client(server, version="v0.0.42", scontrol=cli) as slurm:
        with pytest.raises(InvalidNodeName):
            await slurm.hold_job(42)  # a user's own node list is never touched
        with pytest.raises(InvalidNodeName):
            await slurm.hold_job(42, unpin=["b42-0"])  # every name is known: not a stale pin
    async with client(server, version="v0.0.42") as slurm:
        with pytest.raises(InvalidNodeName):
            await slurm.hold_job(42, unpin=["b42-0"])
    assert cli.calls == []
    assert [s.method for s in server.seen] == ["POST", "POST", "GET", "POST"]


async def test_token_file_is_reread_when_it_changes(server: Scripted, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("SLURM_JWT=first\n")
    server.on("GET", "/slurm/v0.0.42/ping/", ok({"pings": []}))
    auth = JwtAuth(user_name="slurm", token=FileToken(path))
    async with SlurmClient(server.url, auth=auth, version="v0.0.42") as slurm:
        await slurm.ping()
        path.write_text("second-and-longer\n")
        await slurm.ping()
        assert "first" not in repr(slurm)
        assert "second" not in repr(slurm)
    assert [s.headers["X-SLURM-USER-TOKEN"] for s in server.seen] == ["first", "second-and-longer"]


async def test_cancel_with_signal(server: Scripted) -> None:
    server.on("DELETE", "/slurm/v0.0.42/job/9", empty())
    async with client(server, version="v0.0.42") as slurm:
        await slurm.cancel_job(9, signal="KILL")
    assert server.seen[0].query == {"signal": "KILL"}


# --- answers that say an update landed, and the bridge's mark on its holds -------------------------

PART_CONFIG = {
    "error_number": 2015,
    "description": "Requested partition configuration not available now",
    "source": "slurm_update_job2()",
}


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.42"])
async def test_2015_on_a_job_update_means_it_landed(
    server: Scripted, version: str, caplog: pytest.LogCaptureFixture
) -> None:
    """slurmctld applies every field, then answers 2015 from its partition check (the bridge partition
    has no node yet for a held job): no error, no warning."""
    server.on("POST", f"/slurm/{version}/job/42", empty([PART_CONFIG], status=500))
    async with client(server, version=version, scontrol=RecordingCli()) as slurm:
        with caplog.at_level(logging.INFO):
            await slurm.set_comment(42, "k8s-bridge: held: x")
            await slurm.hold_job(42)
    assert [s.body for s in server.seen] == [{"comment": "k8s-bridge: held: x"}, {"hold": True}]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_the_mark_rides_in_the_hold_where_rest_takes_it(server: Scripted) -> None:
    server.on("POST", "/slurm/v0.0.42/job/42", empty())
    cli = RecordingCli()
    async with client(server, version="v0.0.42", scontrol=cli) as slurm:
        await slurm.hold_job(42, admin_comment="k8s-bridge: held", comment="why")
    assert server.seen[0].body == {"hold": True, "admin_comment": "k8s-bridge: held", "comment": "why"}
    assert cli.calls == []


async def test_v0038_marks_by_scontrol_before_the_hold_and_clears_after_the_release(server: Scripted) -> None:
    """Whatever fails in between, an admin hold of the bridge's never lacks its mark."""
    order: list[str] = []

    class Ordered(RecordingCli):
        async def run(self, *args: str) -> str:
            order.append(f"scontrol {' '.join(args)}")
            return ""

    def posted() -> web.Response:
        order.append("POST")
        return web.json_response({"errors": [], "warnings": []})

    server.on("POST", "/slurm/v0.0.38/job/42", posted)
    async with client(server, version="v0.0.38", scontrol=Ordered()) as slurm:
        await slurm.hold_job(42, admin_comment="k8s-bridge: held\nx")
        await slurm.pin_and_release(42, nodes=["b42-0"], constraints="bridge-job-42", admin_comment="")
    assert order == [
        "scontrol update JobId=42 AdminComment=k8s-bridge: held x",  # one argv element, one line
        "POST",
        "POST",
        "scontrol update JobId=42 AdminComment=",
    ]
    assert "admin_comment" not in server.seen[0].body


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.42"])
async def test_released_is_awaited_once_the_release_landed_before_a_v0038_admin_comment_clear(
    server: Scripted, version: str
) -> None:
    """The bridge's Released Event is written at the release, not after an scontrol subprocess."""
    order: list[str] = []

    class Ordered(RecordingCli):
        async def run(self, *args: str) -> str:
            order.append("scontrol")
            return ""

    def posted() -> web.Response:
        order.append("POST")
        return web.json_response({"errors": [], "warnings": []})

    async def released() -> None:
        order.append("released")

    server.on("POST", f"/slurm/{version}/job/42", posted)
    async with client(server, version=version, scontrol=Ordered()) as slurm:
        await slurm.pin_and_release(
            42, nodes=["b42-0"], constraints="bridge-job-42", admin_comment="", released=released
        )
    # v0.0.40+ clears the admin comment in the same body: one call, then released.
    assert order == (["POST", "released", "scontrol"] if version == "v0.0.38" else ["POST", "released"])


async def test_a_missing_token_file_is_an_auth_error_not_an_oserror(tmp_path: Path) -> None:
    token = FileToken(tmp_path / "missing")
    with pytest.raises(SlurmAuthError, match="cannot read the token file"):
        await token.get()


async def test_v0038_scontrol_2015_on_the_admin_comment_is_an_update_that_landed(server: Scripted) -> None:
    class Answers2015(RecordingCli):
        async def run(self, *args: str) -> str:
            raise _classify("Requested partition configuration not available now for job 42", 1)

    server.on("POST", "/slurm/v0.0.38/job/42", empty())
    async with client(server, version="v0.0.38", scontrol=Answers2015()) as slurm:
        await slurm.hold_job(42, admin_comment="k8s-bridge: held")
    assert server.seen[0].body == {"hold": True}


@pytest.mark.parametrize(
    "message", ["Job has already finished for job 358", "Job/step already completing or completed"]
)
def test_scontrol_on_a_job_that_has_finished_is_job_already_done(message: str) -> None:
    """22.05's scontrol (the admin comment of a hold conversion) on a job cancelled since the poll."""
    assert isinstance(_classify(message, 1), JobAlreadyDone)
