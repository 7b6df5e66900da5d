"""The admission webhook server over real TLS: AdmissionReview round trip, certificate reload."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from bridge.runtime.handlers import Object
from bridge.runtime.webhook import AdmissionResponse, WebhookServer


def write_pair(directory: Path, common_name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    # Write aside and rename, as a Secret volume update does.
    tmp_cert, tmp_key = directory / ".tls.crt", directory / ".tls.key"
    tmp_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tmp_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    os.replace(tmp_key, key_file)
    os.replace(tmp_cert, cert_file)
    return cert_file, key_file


def review(uid: str, obj: Object) -> Object:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "object": obj},
    }


async def mutate(request: Object) -> AdmissionResponse:
    if request["object"].get("bad"):
        return AdmissionResponse.deny("bad object", code=422)
    return AdmissionResponse.allow(patch=[{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}])


async def explode(request: Object) -> AdmissionResponse:
    raise RuntimeError("bug")


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def server(tmp_path: Path, registry: CollectorRegistry) -> AsyncIterator[WebhookServer]:
    cert_file, key_file = write_pair(tmp_path, "first")
    webhook = WebhookServer(
        cert_file=cert_file,
        key_file=key_file,
        host="127.0.0.1",
        port=0,
        reload_interval=0.05,
        registry=registry,
    )
    webhook.register("/mutate", mutate)
    webhook.register("/explode", explode)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(webhook.run())
        async with asyncio.timeout(5):
            while webhook.port == 0:
                await asyncio.sleep(0.01)
        yield webhook
        webhook.stop()


def client_context(cafile: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cafile))
    context.check_hostname = False  # self-signed for "localhost", reached on 127.0.0.1
    return context


async def post(webhook: WebhookServer, path: str, body: Any, cafile: Path) -> tuple[int, Any]:
    connector = aiohttp.TCPConnector(ssl=client_context(cafile), force_close=True)
    url = f"https://127.0.0.1:{webhook.port}{path}"
    async with aiohttp.ClientSession(connector=connector) as http, http.post(url, json=body) as response:
        return response.status, await response.json()


async def peer_common_name(webhook: WebhookServer) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", webhook.port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def test_admission_review_round_trip(server: WebhookServer, tmp_path: Path) -> None:
    status, body = await post(server, "/mutate", review("u-1", {"metadata": {}}), tmp_path / "tls.crt")
    assert status == 200
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    response = body["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == ("u-1", True, "JSONPatch")
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}
    ]
    _, denied = await post(server, "/mutate", review("u-2", {"bad": True}), tmp_path / "tls.crt")
    assert denied["response"] == {
        "uid": "u-2",
        "allowed": False,
        "status": {"code": 422, "message": "bad object"},
    }


async def test_handler_failure_and_bad_input(server: WebhookServer, tmp_path: Path) -> None:
    _, body = await post(server, "/explode", review("u-3", {}), tmp_path / "tls.crt")
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 500
    status, _ = await post(server, "/mutate", {"not": "a review"}, tmp_path / "tls.crt")
    assert status == 400


async def test_certificate_reloaded_when_files_change(server: WebhookServer, tmp_path: Path) -> None:
    assert await peer_common_name(server) == "first"
    write_pair(tmp_path, "second")
    async with asyncio.timeout(5):
        while server.reloads == 0:
            await asyncio.sleep(0.02)
    assert await peer_common_name(server) == "second"
    status, body = await post(server, "/mutate", review("u-4", {}), tmp_path / "tls.crt")
    assert (status, body["response"]["allowed"]) == (200, True)


async def test_broken_pair_keeps_the_current_certificate(server: WebhookServer, tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("half written")
    assert server.check_certificates() is False
    assert await peer_common_name(server) == "first"


async def test_requests_are_counted_by_webhook_and_result_code_as_controller_runtime_does(
    server: WebhookServer, registry: CollectorRegistry, tmp_path: Path
) -> None:
    cafile = tmp_path / "tls.crt"
    await post(server, "/mutate", review("u-1", {"metadata": {}}), cafile)
    await post(server, "/mutate", review("u-2", {"bad": True}), cafile)
    await post(server, "/explode", review("u-3", {}), cafile)
    await post(server, "/explode", {"not": "a review"}, cafile)

    def requests(webhook: str, code: str) -> float | None:
        return registry.get_sample_value(
            "controller_runtime_webhook_requests_total", {"webhook": webhook, "code": code}
        )

    assert requests("/mutate", "200") == 1
    assert requests("/mutate", "422") == 1
    assert requests("/explode", "500") == 1
    assert requests("/explode", "400") == 1
    latency = "controller_runtime_webhook_latency_seconds_count"
    assert registry.get_sample_value(latency, {"webhook": "/mutate"}) == 2
    in_flight = "controller_runtime_webhook_requests_in_flight"
    assert registry.get_sample_value(in_flight, {"webhook": "/explode"}) == 0
