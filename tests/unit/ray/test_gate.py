"""bridge.ray.gate: which RayJobs pass, are gated or denied; the patch applied; hostile requests."""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.api.mixing import RaySpec
from bridge.ray.gate import GateDecision, GateKind, review_rayjob
from tests.fixtures.mixing import target
from tests.fixtures.ray_objects import (
    MIXING,
    NAMESPACE,
    RAYJOB_UID,
    REQUEST_UID,
    admission_request,
    apply_patch,
    gated,
    make_spec,
    ray_of,
    raycluster,
    rayjob,
)
from translators.ray import (
    ANNOTATION_GATE,
    ANNOTATION_GATED_BY,
    ANNOTATION_QUEUE_NAME,
    ANNOTATION_WORKER_RESOURCES,
    ANNOTATION_WORKERS,
    FINALIZER,
    Translation,
    UntranslatableCode,
    gate_of,
    gate_resource,
    translate,
)

SPEC = make_spec()
RAY = ray_of(SPEC)
GATE = gate_resource(prefix="k8s-bridge-", request_uid=REQUEST_UID)
QUEUES = {(NAMESPACE, "ray"), (NAMESPACE, "urgent"), ("ray-queues", "ray")}


def exists(namespace: str, name: str) -> bool:
    return (namespace, name) in QUEUES


def review(
    obj: dict[str, Any] | None = None,
    *,
    request: dict[str, Any] | None = None,
    ray: RaySpec | None = RAY,
    cluster: dict[str, Any] | str | None = "default",
    selected: bool = True,
    queues: Callable[[str, str], bool] = exists,
) -> GateDecision:
    decision = review_rayjob(
        request=request if request is not None else admission_request(obj if obj is not None else rayjob()),
        mixing_name=MIXING,
        ray=ray,
        raycluster=raycluster() if cluster == "default" else cluster,  # type: ignore[arg-type]
        cluster_selected=selected,
        local_queue_exists=queues,
    )
    assert "\n" not in decision.why
    assert decision.why.isascii()
    return decision


def gate(obj: dict[str, Any] | None = None, **kwargs: Any) -> tuple[GateDecision, dict[str, Any]]:
    """The decision (a gate) and the object the API server stores after the patch."""
    request = admission_request(obj if obj is not None else rayjob())
    decision = review(request=request, **kwargs)
    assert decision.kind is GateKind.GATE, decision
    assert decision.gate is not None
    return decision, apply_patch(request["object"], decision.patch)


def denied(obj: dict[str, Any], **kwargs: Any) -> GateDecision:
    decision = review(obj, **kwargs)
    assert decision.kind is GateKind.DENY, decision
    assert decision.message is not None
    assert decision.message.isascii()
    assert "\n" not in decision.message
    assert not decision.patch
    return decision


def entry(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obj["spec"]["entrypointResources"])  # type: ignore[no-any-return]


# --- pass untouched -------------------------------------------------------------------------------


class TestPass:
    def test_the_base_case_gates(self) -> None:
        # Every pass test below changes one thing of this case.
        assert review().kind is GateKind.GATE

    @pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
    def test_not_a_create(self, operation: str) -> None:
        decision = review(request=admission_request(rayjob(), operation=operation))
        assert (decision.kind, decision.patch, decision.warnings) == (GateKind.PASS, (), ())

    @pytest.mark.parametrize(
        "kind",
        [
            {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
            {"group": "example.com", "version": "v1", "kind": "RayJob"},
        ],
    )
    def test_not_a_rayjob(self, kind: dict[str, str]) -> None:
        decision = review(request=admission_request(rayjob(), kind=kind))
        assert decision.kind is GateKind.PASS

    def test_no_cluster_selector(self) -> None:
        assert review(rayjob(cluster=None)).kind is GateKind.PASS
        assert review(rayjob(cluster=None, clusterSelector={"app": "shared"})).kind is GateKind.PASS
        assert review(rayjob(cluster="")).kind is GateKind.PASS

    def test_no_ray_configuration(self) -> None:
        assert review(ray=None).kind is GateKind.PASS

    def test_sidecar_mode(self) -> None:
        assert review(rayjob(submissionMode="SidecarMode")).kind is GateKind.PASS

    def test_interactive_mode_is_gated(self) -> None:
        assert review(rayjob(submissionMode="InteractiveMode")).kind is GateKind.GATE

    def test_cluster_not_selected(self) -> None:
        decision = review(selected=False)
        assert (decision.kind, decision.warnings) == (GateKind.PASS, ())

    def test_cluster_not_found_passes_with_a_warning(self) -> None:
        decision = review(cluster=None, selected=False)
        assert decision.kind is GateKind.PASS
        assert not decision.patch
        (warning,) = decision.warnings
        assert "'shared'" in warning
        assert "not gated" in warning
        assert NAMESPACE in warning


# --- the gate ------------------------------------------------------------------------------------


class TestGate:
    def test_patch_on_a_bare_rayjob(self) -> None:
        decision, stored = gate()
        assert decision.gate == GATE
        assert entry(stored) == {GATE: 1}
        assert stored["metadata"]["annotations"] == {ANNOTATION_GATE: GATE, ANNOTATION_GATED_BY: MIXING}
        assert stored["metadata"]["finalizers"] == [FINALIZER]
        assert [op["path"] for op in decision.patch] == [
            "/spec/entrypointResources",
            "/metadata/annotations",
            "/metadata/finalizers",
        ]
        assert decision.warnings == ()

    def test_existing_annotations_and_finalizers_are_kept(self) -> None:
        job = rayjob(annotations={"team": "a"})
        job["metadata"]["finalizers"] = ["example.com/keep"]
        decision, stored = gate(job)
        assert stored["metadata"]["annotations"] == {
            "team": "a",
            ANNOTATION_GATE: GATE,
            ANNOTATION_GATED_BY: MIXING,
        }
        assert stored["metadata"]["finalizers"] == ["example.com/keep", FINALIZER]
        paths = [op["path"] for op in decision.patch]
        assert "/metadata/annotations/bridge.k8s-bridge.io~1ray-gate" in paths
        assert "/metadata/annotations/bridge.k8s-bridge.io~1ray-gated-by" in paths
        assert "/metadata/finalizers/-" in paths

    def test_the_finalizer_is_not_added_twice(self) -> None:
        job = rayjob()
        job["metadata"]["finalizers"] = [FINALIZER]
        _, stored = gate(job)
        assert stored["metadata"]["finalizers"] == [FINALIZER]

    def test_the_users_entrypoint_resources_are_kept(self) -> None:
        decision, stored = gate(rayjob(entrypointResources='{"disk": 0.5, "special": 1}'))
        assert entry(stored) == {"disk": 0.5, "special": 1, GATE: 1}
        (warning,) = decision.warnings
        assert "disk, special" in warning

    def test_a_saved_manifest_is_gated_again_with_the_new_token(self) -> None:
        saved = gated(rayjob(), request_uid="11111111-2222-3333-4444-555555555555")
        saved["metadata"]["finalizers"] = [FINALIZER]
        old = saved["metadata"]["annotations"][ANNOTATION_GATE]
        assert old != GATE
        decision, stored = gate(saved)
        assert entry(stored) == {GATE: 1}
        assert stored["metadata"]["annotations"][ANNOTATION_GATE] == GATE
        assert stored["metadata"]["finalizers"] == [FINALIZER]
        assert any(old in w for w in decision.warnings)
        assert gate_of(stored, "k8s-bridge-") == GATE

    def test_a_reinvoked_webhook_changes_nothing_more(self) -> None:
        _, once = gate()
        again = review(request={**admission_request(once)})
        assert again.kind is GateKind.GATE
        assert apply_patch(once, again.patch) == once
        assert again.warnings == ()

    def test_the_gated_rayjob_translates(self) -> None:
        _, stored = gate(rayjob(annotations={ANNOTATION_WORKERS: "3"}))
        stored["metadata"]["uid"] = RAYJOB_UID
        result = translate(rayjob=stored, raycluster=raycluster(), spec=SPEC, mixing_name=MIXING)
        assert isinstance(result, Translation), str(result)
        assert result.gate == GATE
        assert result.workers == 3

    def test_generate_name(self) -> None:
        job = rayjob()
        del job["metadata"]["name"]
        job["metadata"]["generateName"] = "train-"
        request = admission_request(job)
        request["name"] = ""
        assert review(request=request).kind is GateKind.GATE
        job["metadata"]["annotations"] = {ANNOTATION_WORKERS: "100"}
        decision = denied(job)
        assert "train-*" in (decision.message or "")

    def test_the_response(self) -> None:
        decision, _ = gate()
        review_body = decision.response().to_review(REQUEST_UID)["response"]
        assert review_body["allowed"] is True
        assert review_body["patchType"] == "JSONPatch"
        assert json.loads(base64.b64decode(review_body["patch"])) == list(decision.patch)
        passed = review(selected=False).response()
        assert (passed.allowed, passed.patch) == (True, None)
        refusal = denied(rayjob(annotations={ANNOTATION_WORKERS: "0"})).response()
        assert (refusal.allowed, refusal.code) == (False, 403)
        assert refusal.message is not None
        assert "ray-workers" in refusal.message


# --- deny ----------------------------------------------------------------------------------------


class TestDeny:
    @pytest.mark.parametrize(
        "raw",
        [
            "not json",
            "[1, 2]",
            '"k"',
            '{"a": "1"}',
            '{"a": -1}',
            '{"a": NaN}',
            '{"a": Infinity}',
            '{"a": true}',
            '{"a": null}',
            '{"": 1}',
            "[" * 2000 + "]" * 2000,
            json.dumps({f"r{i}": 1 for i in range(600)}),
        ],
    )
    def test_entrypoint_resources_that_are_not_an_object_of_amounts(self, raw: str) -> None:
        decision = denied(rayjob(entrypointResources=raw))
        assert decision.code is UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES
        assert "entrypointResources" in (decision.message or "")

    def test_entrypoint_resources_just_under_the_size_limit_are_gated(self) -> None:
        raw = json.dumps({f"r{i}": 1 for i in range(300)})
        assert len(raw) < 4096
        assert review(rayjob(entrypointResources=raw)).kind is GateKind.GATE

    def test_entrypoint_resources_not_a_string(self) -> None:
        decision = denied(rayjob(entrypointResources={"a": 1}))
        assert decision.code is UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES

    @pytest.mark.parametrize("key", ["k8s-bridge-0f8fad5bd9cc", "k8s-bridge-mine", "k8s-bridge-"])
    def test_a_key_under_the_bridges_prefix(self, key: str) -> None:
        decision = denied(rayjob(entrypointResources=json.dumps({key: 1})))
        assert decision.code is UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES
        assert "rename" in (decision.message or "")

    def test_a_forged_old_gate_needs_its_annotation(self) -> None:
        # The key alone (no annotation of the bridge naming it) is not a saved gate.
        saved = gated(rayjob(), request_uid="11111111-2222-3333-4444-555555555555")
        del saved["metadata"]["annotations"][ANNOTATION_GATE]
        assert denied(saved).code is UntranslatableCode.INVALID_ENTRYPOINT_RESOURCES

    def test_too_many_workers(self) -> None:
        decision = denied(rayjob(annotations={ANNOTATION_WORKERS: "65"}))
        assert decision.code is UntranslatableCode.TOO_MANY_WORKERS
        assert "from 1 to 64" in (decision.message or "")

    @pytest.mark.parametrize("value", ["0", "x", "-3", "1.5", ""])
    def test_malformed_workers(self, value: str) -> None:
        assert (
            denied(rayjob(annotations={ANNOTATION_WORKERS: value})).code
            is UntranslatableCode.INVALID_WORKER_COUNT
        )

    @pytest.mark.parametrize("raw", ["{", "[]", '{"cpu": "lots", "memory": "1Gi"}', '{"cpu": "1"}'])
    def test_malformed_worker_resources(self, raw: str) -> None:
        decision = denied(rayjob(annotations={ANNOTATION_WORKER_RESOURCES: raw}))
        assert decision.code is UntranslatableCode.INVALID_WORKER_RESOURCES

    def test_a_missing_local_queue_names_queue_and_namespace(self) -> None:
        decision = denied(rayjob(), queues=lambda namespace, name: False)
        assert decision.code is UntranslatableCode.INVALID_QUEUE
        assert "LocalQueue ray does not exist in namespace team-a" in (decision.message or "")
        assert ANNOTATION_QUEUE_NAME in (decision.message or "")

    def test_the_queue_is_looked_up_where_the_jobset_goes(self) -> None:
        asked: list[tuple[str, str]] = []

        def record(namespace: str, name: str) -> bool:
            asked.append((namespace, name))
            return True

        ray = ray_of(make_spec(mapping={"default": target("ray", namespace="ray-queues")}))
        review(rayjob(annotations={ANNOTATION_QUEUE_NAME: "urgent"}), ray=ray, queues=record)
        assert asked == [("ray-queues", "urgent")]

    def test_a_queue_annotation_to_an_existing_queue_gates(self) -> None:
        assert review(rayjob(annotations={ANNOTATION_QUEUE_NAME: "urgent"})).kind is GateKind.GATE
        assert (
            denied(rayjob(annotations={ANNOTATION_QUEUE_NAME: "nope"})).code
            is UntranslatableCode.INVALID_QUEUE
        )
        assert (
            denied(rayjob(annotations={ANNOTATION_QUEUE_NAME: "No!"})).code
            is UntranslatableCode.INVALID_QUEUE
        )

    def test_an_entrypoint_larger_than_a_worker(self) -> None:
        decision = denied(rayjob(entrypointNumCpus=4))
        assert decision.code is UntranslatableCode.ENTRYPOINT_TOO_LARGE
        assert ANNOTATION_WORKER_RESOURCES in (decision.message or "")
        raw = '{"cpu": "4", "memory": "8Gi"}'
        assert (
            review(rayjob(entrypointNumCpus=4, annotations={ANNOTATION_WORKER_RESOURCES: raw})).kind
            is GateKind.GATE
        )

    def test_the_message_names_the_rayjob_and_the_mixing(self) -> None:
        message = denied(rayjob(annotations={ANNOTATION_WORKERS: "x"})).message or ""
        assert f"RayJob '{NAMESPACE}'/'train'" in message
        assert f"WorkloadMixing '{MIXING}'" in message


# --- hostile requests ----------------------------------------------------------------------------

HOSTILE = st.sampled_from(["$(SECRET)", "\u202e", "\x00", "\n", '"', "k8s-bridge-", "~1", "/", "\\u0000"])
TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join),
)
AMOUNT = st.one_of(
    st.integers(min_value=-5, max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    TEXT,
)
ENTRYPOINT = st.one_of(
    st.none(),
    TEXT,
    st.text(alphabet=string.printable, min_size=4000, max_size=6000),
    st.dictionaries(TEXT, AMOUNT, max_size=6).map(lambda d: json.dumps(d, allow_nan=True)),
    st.dictionaries(st.text(max_size=20), st.integers(min_value=0, max_value=8), max_size=6).map(json.dumps),
)
ANNOTATIONS = st.dictionaries(
    st.one_of(
        st.sampled_from([ANNOTATION_WORKERS, ANNOTATION_WORKER_RESOURCES, ANNOTATION_GATE, "a/b~c"]), TEXT
    ),
    TEXT,
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entrypoint=ENTRYPOINT,
    annotations=ANNOTATIONS,
    namespace=st.sampled_from([NAMESPACE, "n" * 63]),
    name=st.sampled_from(["train", "a" * 253]),
    uid=st.one_of(st.uuids().map(str), TEXT),
    finalizers=st.one_of(st.none(), st.lists(st.sampled_from([FINALIZER, "x/y"]), max_size=2, unique=True)),
)
def test_any_request_is_gated_consistently_or_denied_cleanly(
    entrypoint: str | None,
    annotations: dict[str, str],
    namespace: str,
    name: str,
    uid: str,
    finalizers: list[str] | None,
) -> None:
    job = rayjob(name=name, namespace=namespace, annotations=annotations)
    if entrypoint is not None:
        job["spec"]["entrypointResources"] = entrypoint
    if finalizers is not None:
        job["metadata"]["finalizers"] = finalizers
    request = admission_request(job, uid=uid)
    queues = {(namespace, "ray")}
    decision = review_rayjob(
        request=request,
        mixing_name=MIXING,
        ray=RAY,
        raycluster=raycluster(namespace=namespace),
        cluster_selected=True,
        local_queue_exists=lambda ns, q: (ns, q) in queues,
    )
    assert decision.kind in (GateKind.GATE, GateKind.DENY)
    assert decision.why.isascii()
    assert "\n" not in decision.why
    for warning in decision.warnings:
        assert warning.isascii()
        assert len(warning) < 400
    if decision.kind is GateKind.DENY:
        assert decision.message is not None
        assert decision.message.isascii()
        assert "\n" not in decision.message
        assert len(decision.message) < 1000
        assert decision.code is not None
        return
    stored = apply_patch(request["object"], decision.patch)
    assert (
        gate_of(stored, "k8s-bridge-")
        == decision.gate
        == gate_resource(prefix="k8s-bridge-", request_uid=uid)
    )
    assert stored["metadata"]["finalizers"].count(FINALIZER) == 1
    assert stored["metadata"]["annotations"][ANNOTATION_GATED_BY] == MIXING
    for key, value in annotations.items():
        if key not in (ANNOTATION_GATE,):
            assert stored["metadata"]["annotations"][key] == value  # nothing else of the user's touched
    before = json.loads(entrypoint) if entrypoint else {}
    after = entry(stored)
    assert {k: v for k, v in after.items() if k != decision.gate} == {
        k: v for k, v in before.items() if not k.startswith("k8s-bridge-")
    }
    # What the webhook let through is what the bridge can serve.
    stored["metadata"]["uid"] = RAYJOB_UID
    result = translate(
        rayjob=stored, raycluster=raycluster(namespace=namespace), spec=SPEC, mixing_name=MIXING
    )
    assert isinstance(result, Translation), str(result)
    assert result.gate == decision.gate
