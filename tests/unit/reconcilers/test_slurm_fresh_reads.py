"""The fresh reads that stand for a job until the job source's cache moves."""

from __future__ import annotations

from bridge.api.slurm_job import SlurmJob
from reconcilers.slurm_fresh_reads import FreshReads


def job(job_id: int = 42, *, nodes: int = 2) -> SlurmJob:
    return SlurmJob(job_id=job_id, partition="bridge", node_count=nodes)


def test_a_read_newer_than_the_cache_stands_until_the_cache_moves() -> None:
    reads = FreshReads()
    cached, fresh = job(), job(nodes=3)
    assert reads.read(42, cached=cached, fresh=fresh)
    assert reads.newest(42, cached) is fresh
    assert reads.newest(42, cached) is fresh
    moved = job(nodes=3)
    assert reads.newest(42, moved) is moved
    assert len(reads) == 0
    assert reads.newest(42, cached) is cached  # forgotten for good


def test_a_read_equal_to_the_cache_is_not_kept_and_drops_an_older_one() -> None:
    reads = FreshReads()
    cached = job()
    reads.read(42, cached=cached, fresh=job(nodes=3))
    assert not reads.read(42, cached=cached, fresh=job())
    assert reads.newest(42, cached) is cached
    assert len(reads) == 0


def test_a_job_gone_from_slurmctld_on_a_fresh_read_is_gone_until_the_cache_moves() -> None:
    reads = FreshReads()
    cached = job()
    assert reads.read(42, cached=cached, fresh=None)
    assert reads.newest(42, cached) is None
    assert reads.newest(42, None) is None
    assert len(reads) == 0


def test_a_read_over_no_cached_job_is_not_kept() -> None:
    """The cache may never show the job (outside the bridged partitions): the read would stand for
    good, and hide the job's purge from slurmctld."""
    reads = FreshReads()
    assert not reads.read(42, cached=None, fresh=job())
    assert reads.newest(42, None) is None


def test_a_read_stands_for_max_age_at_most() -> None:
    """Changed and changed back, the job's text is the cached one again: the cache does not move."""
    now = [0.0]
    reads = FreshReads(max_age=30.0, clock=lambda: now[0])
    cached, fresh = job(), job(nodes=3)
    reads.read(42, cached=cached, fresh=fresh)
    now[0] = 29.0
    assert reads.newest(42, cached) is fresh
    now[0] = 30.0
    assert reads.newest(42, cached) is cached
    assert len(reads) == 0


def test_only_the_last_reads_are_kept() -> None:
    reads = FreshReads(kept=2)
    cached = {i: job(i) for i in range(3)}
    for i in range(3):
        reads.read(i, cached=cached[i], fresh=job(i, nodes=3))
    assert len(reads) == 2
    assert reads.newest(0, cached[0]) is cached[0]
    assert reads.newest(2, cached[2]) is not cached[2]
