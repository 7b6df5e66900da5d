"""slurmrestd's memory under the bridge's whole job lists, with glibc's default arenas and with two.

Why: with a deep queue slurmrestd's RSS grew all along a soak (1.0 -> 1.4 GB with 2,000 queued jobs),
and a site's slurmrestd is shared with every other client. What grows is not the connections nor the
error answers (both measured flat) but the whole job lists: each builds the list's data in the
worker thread that serves it, and glibc gives each thread a malloc arena of its own (eight a core by
default), which keeps its peak. Sequential lists served by different threads then add up to one peak
per thread. ``MALLOC_ARENA_MAX=2`` in slurmrestd's environment (what the local stack and
docs/controller.md's "Slurm settings for sites" set) bounds that.

``K8S_BRIDGE_SLURMRESTD_MEM_JOBS`` (1,000) held jobs are queued in one Slurm cluster per setting; then
1,000 pings on a new connection each and 1,000 reads of a node that does not exist (error answers),
then ``K8S_BRIDGE_SLURMRESTD_MEM_LISTS`` (40) whole ``GET /jobs`` lists are read one after another (as the
bridge's job source does), then 10 rounds of two at once (a second client beside the bridge). The
RSS of slurmrestd is printed after every 10 lists, with the ratio of the two settings' final RSS
measured in the same run. Asserts only that every list held every job. One Slurm version at a time
(``K8S_BRIDGE_BENCH_SLURM``, default 22.05; ``22.05,24.11`` runs both). Run:
``pytest tests/bench/test_slurmrestd_memory_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.sandbox.slurm import SLURMRESTD_MALLOC_ARENA_MAX, VERSIONS, SlurmCluster, SlurmVersion
from tests.bench.bench_support import env_int, load_average, memory_mib, print_table, write_result
from tests.fixtures.slurm import started_cluster

pytestmark = pytest.mark.timeout(1800)

BENCH_VERSIONS = [v for v in VERSIONS if v in os.environ.get("K8S_BRIDGE_BENCH_SLURM", "22.05").split(",")]
JOBS = env_int("K8S_BRIDGE_SLURMRESTD_MEM_JOBS", 1000)
LISTS = env_int("K8S_BRIDGE_SLURMRESTD_MEM_LISTS", 40)
PAIRS = 10
SMALL_REQUESTS = 1000
SUBMITTERS = 8


def slurmrestd_pid(cluster: SlurmCluster) -> int:
    for pid in cluster.process_ids():
        if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmrestd":
            return pid
    raise AssertionError(f"no slurmrestd among the cluster's processes {cluster.process_ids()}")


async def read_lists(cluster: SlurmCluster, *, pid: int) -> list[tuple[str, float]]:
    """RSS (MiB) of slurmrestd after each step of whole job lists; each list must hold every job."""
    url = f"{cluster.rest_url}/slurm/{cluster.rest_version}/jobs"
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": cluster.token()}
    steps: list[tuple[str, float]] = [("started, jobs queued", memory_mib(pid)[0])]
    ping = f"{cluster.rest_url}/slurm/{cluster.rest_version}/ping"
    for _ in range(SMALL_REQUESTS):  # a connection each
        async with aiohttp.ClientSession(headers=headers) as fresh, fresh.get(ping) as response:
            await response.read()
    steps.append((f"after {SMALL_REQUESTS} pings on a new connection each", memory_mib(pid)[0]))
    async with aiohttp.ClientSession(headers=headers) as session:
        unknown = f"{cluster.rest_url}/slurm/{cluster.rest_version}/node/b999999-0"
        for _ in range(SMALL_REQUESTS):  # an error answer each (slurmrestd closes the connection)
            async with session.get(unknown) as response:
                await response.read()
        steps.append((f"after {SMALL_REQUESTS} reads of an unknown node", memory_mib(pid)[0]))

        async def one_list() -> None:
            async with session.get(url) as response:
                answer: dict[str, Any] = await response.json(content_type=None)
            assert response.status == 200, answer
            assert len(answer["jobs"]) >= JOBS, len(answer["jobs"])

        for done in range(1, LISTS + 1):
            await one_list()
            if done % 10 == 0 or done == LISTS:
                steps.append((f"after {done} lists, one at a time", memory_mib(pid)[0]))
        for _ in range(PAIRS):
            await asyncio.gather(one_list(), one_list())
        steps.append((f"after {PAIRS} more rounds of two at once", memory_mib(pid)[0]))
    return steps


def measure(version: SlurmVersion, arena_max: str | None) -> list[tuple[str, float]]:
    cluster = SlurmCluster(version=version, slurmrestd_malloc_arena_max=arena_max)
    with contextlib.contextmanager(started_cluster)(cluster) as started:

        def submit(index: int) -> int:
            return started.sbatch("-N1", "--ntasks=1", "--mem=100", "--time=10", f"--job-name=mem-{index}")

        with ThreadPoolExecutor(SUBMITTERS) as pool:
            list(pool.map(submit, range(JOBS)))
        return asyncio.run(read_lists(started, pid=slurmrestd_pid(started)))


@pytest.mark.parametrize("version", BENCH_VERSIONS)
def test_slurmrestd_memory_under_whole_job_lists(version: SlurmVersion) -> None:
    began = time.monotonic()
    default = measure(version, None)
    bounded = measure(version, SLURMRESTD_MALLOC_ARENA_MAX)
    rows = [
        (label, f"{before:7.0f} MiB  {after:7.0f} MiB")
        for (label, before), (_, after) in zip(default, bounded, strict=True)
    ]
    ratio = bounded[-1][1] / default[-1][1]
    rows.append(("final RSS, two arenas / glibc's default", f"{ratio:.2f}"))
    rows.append(("load average", load_average()))
    rows.append(("seconds", f"{time.monotonic() - began:.0f}"))
    print_table(
        f"slurmrestd RSS, Slurm {version}, {JOBS} queued jobs (glibc's default arenas | "
        f"MALLOC_ARENA_MAX={SLURMRESTD_MALLOC_ARENA_MAX})",
        rows,
    )
    write_result(
        f"slurmrestd-memory-{version}",
        {"version": version, "jobs": JOBS, "lists": LISTS, "default": default, "bounded": bounded},
    )
