"""bridge.runtime.informer: a caller's ``view`` of the objects a shared informer caches."""

from __future__ import annotations

from typing import cast

from bridge.runtime.client import Client
from bridge.runtime.discovery import Resource
from bridge.runtime.handlers import Object
from bridge.runtime.informer import SharedInformerFactory

JOBSETS = Resource(
    group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets", kind="JobSet", namespaced=True
)
API = "jobset.x-k8s.io/v1alpha2"


class Discovery:
    async def resource(self, api_version: str, kind: str) -> Resource:
        return JOBSETS


def without_spec(obj: Object) -> Object:
    obj.pop("spec", None)
    return obj


async def test_a_view_is_applied_after_the_factorys_transform_and_shared_only_with_the_same_view() -> None:
    factory = SharedInformerFactory(cast(Client, Discovery()))
    plain = await factory.informer(API, "JobSet", label_selector="a")
    viewed = await factory.informer(API, "JobSet", label_selector="a", view=without_spec)
    again = await factory.informer(API, "JobSet", label_selector="a", view=without_spec)
    assert viewed is again
    assert viewed is not plain

    obj: Object = {"metadata": {"name": "js", "namespace": "ns", "managedFields": [{}]}, "spec": {"x": 1}}
    viewed.store.put(obj)
    stored = viewed.store.get("ns/js")
    assert stored == {"metadata": {"name": "js", "namespace": "ns"}}  # the factory's strip, then the view
    plain.store.put({"metadata": {"name": "js", "namespace": "ns"}, "spec": {"x": 1}})
    assert plain.store.get("ns/js") == {"metadata": {"name": "js", "namespace": "ns"}, "spec": {"x": 1}}
