"""Mappers every bridge needs: from a Kueue Workload to the requests of the JobSet that owns it.

Kueue names a JobSet's Workload by a hash and labels it with the JobSet's uid; its owner reference
names the JobSet. A bridge keys its requests by its external job, which the JobSet's labels carry, so
a Workload change maps through the owning JobSet, read from the bridge's own JobSet cache.
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.admission import JOBSET_KIND
from bridge.runtime.cache import Store
from bridge.runtime.controller import Request
from bridge.runtime.handlers import Object

__all__ = ["through_owner_jobset"]


def through_owner_jobset(
    jobsets: Store, requests_of_jobset: Callable[[Object], list[Request]]
) -> Callable[[Object], list[Request]]:
    """A mapper of Workloads: the requests ``requests_of_jobset`` gives for each owning JobSet cached."""

    def mapper(obj: Object) -> list[Request]:
        meta = obj.get("metadata") or {}
        out: list[Request] = []
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == JOBSET_KIND:
                owner = jobsets.get(f"{meta.get('namespace')}/{ref.get('name')}")
                if owner is not None:
                    out.extend(requests_of_jobset(owner))
        return out

    return mapper
