"""bridge.slurm.job_reads: a change of a bridged job's Slurm node reads that job alone, at once."""

from __future__ import annotations

from bridge.api.slurm_job import JobState, SlurmJob
from bridge.api.slurm_node import NodeState, SlurmNode
from bridge.slurm.job_reads import JobReadOnNodeChange
from bridge.slurm.source import SlurmNodeSource, node_object
from bridge.slurmrest.versions import NodesPage
from reconcilers.slurm import INDEX_JOB, node_job_id, node_job_keys
from tests.unit.slurm.test_slurm_source import Clock, FakeSlurm, job_source, page, sjob, snode


def allocated(name: str, *features: str) -> SlurmNode:
    return snode(name, *features).model_copy(update={"state": NodeState.ALLOCATED})


async def test_a_running_jobs_end_seen_on_its_node_is_read_alone_before_the_next_list() -> None:
    """The job ends: its node turns idle in the node poll, and the job source reads that job alone,
    though its whole list is not due for seconds."""
    clock = Clock()
    running = sjob(7, state=JobState.RUNNING)
    slurm = FakeSlurm(
        [page(sjob(1), running)],
        nodes=[
            NodesPage(nodes=(allocated("b7-0", "bridge-job-7"),), update_time=1),
            NodesPage(nodes=(snode("b7-0", "bridge-job-7"),), update_time=2),
            NodesPage(nodes=(), update_time=3),
        ],
    )
    jobs = job_source(slurm, interval=10.0, clock=clock)
    nodes = SlurmNodeSource(
        slurm=slurm,
        keep=lambda n: node_job_id(n) is not None,
        interval=1.0,
        indexers={INDEX_JOB: node_job_keys},
    )
    nodes.add_handler(JobReadOnNodeChange(jobs))
    await jobs.poll_once()
    await nodes.poll_once()  # the node registers: the job itself did not change
    assert not jobs.due_reads()
    clock.now = 1.0

    slurm.current = {7: sjob(7, state=JobState.COMPLETED)}
    await nodes.poll_once()
    await jobs.poll_once()
    assert slurm.calls[-1] == "get_job(7)"
    assert jobs.job(7) == sjob(7, state=JobState.COMPLETED)

    await nodes.poll_once()  # the bridge deletes the node of the finished job: nothing to read
    assert not jobs.due_reads()
    assert jobs.lists == 1


async def test_a_node_of_a_running_job_going_away_reads_the_job() -> None:
    slurm = FakeSlurm(
        [page(sjob(7, state=JobState.RUNNING))],
        nodes=[
            NodesPage(nodes=(allocated("b7-0", "bridge-job-7"),), update_time=1),
            NodesPage(nodes=(), update_time=2),
        ],
    )
    jobs = job_source(slurm, interval=10.0, clock=Clock())
    nodes = SlurmNodeSource(slurm=slurm, keep=lambda n: node_job_id(n) is not None, interval=1.0)
    nodes.add_handler(JobReadOnNodeChange(jobs))
    await jobs.poll_once()
    await nodes.poll_once()
    await nodes.poll_once()
    assert jobs.due_reads() == {7}


async def test_nodes_not_of_a_bridged_job_read_nothing() -> None:
    read: list[int] = []

    class Jobs:
        def job(self, job_id: int) -> SlurmJob | None:
            return sjob(job_id, state=JobState.RUNNING)

        def refresh(self, job_id: int) -> None:
            read.append(job_id)

    handler = JobReadOnNodeChange(Jobs())
    other = node_object(snode("c1", "gpu", dynamic=False))
    ours = node_object(snode("b9-0", "bridge-job-9"))
    handler.on_add(ours, is_initial_list=False)
    handler.on_update(other, other)
    handler.on_delete(other)
    assert read == []
    handler.on_update(ours, ours)
    assert read == [9]
