"""reconcilers.slurm.JobsWithJobSets: the ids of a cluster's jobs that have a JobSet, kept up to date
by the keys that changed since the last look, equal at every look to a count from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.runtime.cache import Store
from bridge.runtime.handlers import Object
from reconcilers.slurm import INDEX_JOB, JobsWithJobSets, jobset_job_keys
from translators.slurm import LABEL_CLUSTER, LABEL_JOB_ID


def jobset(name: str, cluster: str, job_id: int) -> Object:
    labels = {LABEL_CLUSTER: cluster, LABEL_JOB_ID: str(job_id)}
    return {"metadata": {"namespace": "ns", "name": name, "labels": labels}}


_step = st.tuples(
    st.sampled_from(["put", "pop"]),
    st.integers(min_value=0, max_value=30),  # the JobSet's name
    st.sampled_from(["hpc", "lab"]),
    st.integers(min_value=1, max_value=12),  # its job id: several JobSets may share one
    st.booleans(),  # look at the ids after this step
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=60))
def test_the_ids_are_those_of_a_count_from_scratch_after_any_changes(
    steps: list[tuple[str, int, str, int, bool]],
) -> None:
    store = Store(indexers={INDEX_JOB: jobset_job_keys})
    looks = {cluster: JobsWithJobSets(store) for cluster in ("hpc", "lab")}  # one cluster each, as a bridge
    for verb, name, cluster, job_id, look in [*steps, ("pop", -1, "hpc", 1, True)]:
        if verb == "put":
            store.put(jobset(f"js-{name}", cluster, job_id))
        else:
            store.pop(f"ns/js-{name}")
        if look:
            for asked in ("hpc", "lab"):
                expected = {
                    int(k.split("/")[1]) for k in store.index_values(INDEX_JOB) if k.startswith(f"{asked}/")
                }
                assert looks[asked].ids(asked) == expected
