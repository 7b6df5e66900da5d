"""The Slurm bridge under load, on the real stack: throughput of held jobs -> JobSets, and release latency.

Issue 5, "Benchmark (bench tier)". Prints figures and ratios against a baseline measured in the same
run; asserts only that the work was done (every JobSet exists, every job ran), never a time.

**Throughput** (``test_held_jobs_to_jobsets_beside_kueue_admission``), one Slurm version
(``K8S_BRIDGE_BENCH_SLURM``, default 22.05; ``22.05,24.11`` runs both):

1. Baseline: Kueue's own admission rate in the same stack. ``K8S_BRIDGE_BENCH_BASELINE_JOBS`` (200)
   plain suspended batch/v1 Jobs are queued to a held ClusterQueue (``stopPolicy: Hold``) with quota
   for all; once every Workload exists the queue is resumed and the time until all are Admitted is
   taken from a watch on Workloads (the local arrival time of each Admitted transition). Their pods
   land on kwok nodes. Both sides' rates use one window rule (:func:`rate_figures`): the ratio is
   middle 80% over middle 80%, and whole over whole beside it.
2. Catch-up: ``K8S_BRIDGE_BENCH_JOBS`` (1000) 1-node jobs submitted with ``sbatch --hold`` (four
   submitters in parallel, argv lists) while no bridge runs; then the bridge starts and the time until
   it has created every JobSet is taken (its own ``create_jobset`` action counter, polled every 0.25 s;
   the JobSet list is checked at the end). The ClusterQueue has zero quota, so nothing is admitted.
3. Steady state with those JobSets: ``K8S_BRIDGE_BENCH_STEADY_SECONDS`` (10) of doing nothing:
   slurmrestd calls per job-poll cycle, Kubernetes calls/s, CPU.
4. Live: ``K8S_BRIDGE_BENCH_LIVE_JOBS`` (a fifth of 2.; 0 skips) more jobs submitted while the bridge
   runs: time from the first sbatch until every JobSet exists, beside the submission time alone.
5. Cleanup: every job ``scancel``-ed; time until the bridge has done its part (JobSet deleted, its
   finalizer removed, for every job) and until every JobSet is gone (Kubernetes' garbage collector
   finishes the foreground deletion).

Kubernetes API calls are counted in the bridge process (``slurm_bridge_child.py`` wraps aiohttp and
serves the counter beside the bridge's metrics), because ``apiserver_request_total`` has no client
label; its delta is printed too, as the whole system's calls per job (Kueue, JobSet, GC included).
slurmrestd calls come from the bridge's own ``k8s_bridge_slurmrestd_request_duration_seconds``.
CPU is utime + stime of the bridge process (``/proc/<pid>/stat``), memory its VmRSS and VmHWM (the
kernel's peak resident set, so no sampling is needed).

**Release latency** (``test_admission_to_running_latency``): ``K8S_BRIDGE_BENCH_RELEASE_JOBS`` (50)
1-node, 1-CPU jobs with quota for all, on process-runner nodes (real slurmd pods). The headline is
node registered IDLE -> job RUNNING (the "release latency" of the target), split into the bridge's
share (node IDLE -> its release call: node poll, work queue, a fresh read of the job, the call) and
Slurm's (release call -> RUNNING: slurmctld's scheduler). A dedicated observer thread
(:class:`ReleaseObserver`) reads slurmrestd every ``K8S_BRIDGE_BENCH_TIGHT_POLL`` (0.02) s plus the
time its reads take (``GET /nodes`` while a node was not seen IDLE yet, ``GET /job/<id>`` for jobs
whose node is up and that were not seen RUNNING yet), so each time is late by at most one of its
rounds (0.04 to 0.05 s at load 3 to 6). The bridge's ``Released`` Event gives the release call's time
(microseconds, the bridge's clock, the same host) and its ``reconciling`` log line the moment it
decided to release (after the fresh read). A slower loop (~0.1 s plus listing JobSets and Workloads)
records Kueue's admissions, for Admitted -> RUNNING (the issue's figure) and Admitted -> node IDLE (pod
start and slurmd: not the bridge). Slurm's own ``StartTime`` (1 s resolution) is printed beside, as a
check. The load average is recorded before, during and after. ``K8S_BRIDGE_BENCH_SCHEDULER_PARAMETERS``
replaces the stack's slurm.conf ``SchedulerParameters`` (``""``: Slurm's defaults).

``K8S_BRIDGE_BENCH_BRIDGE_ARGS`` adds flags to the bridge (e.g. ``--max-concurrent-reconciles=16``).
``K8S_BRIDGE_BENCH_RESULTS=<dir>`` writes each test's figures as JSON there (what
``experiments/001-slurm-bridge-throughput/run`` does). Run: ``tox -e bench -- -k slurm_bridge`` or
``pytest tests/bench/test_slurm_bridge_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bridge.admission import JOB_UID_LABEL, WorkloadState, describe_workload
from bridge.sandbox.build import MissingPrerequisiteError
from bridge.sandbox.e2e import JOBSETS, BridgeProcess, E2ESettings, E2EStack
from bridge.sandbox.processes import StackError
from bridge.sandbox.slurm import BRIDGE_PARTITION, VERSIONS, SlurmCluster, SlurmVersion
from bridge.sandbox.stack import KubeStack
from tests.bench.bench_profile import PROFILE_DIR, end_phase
from tests.bench.bench_support import (
    BridgeProbe,
    Sample,
    by_labels,
    condition_time,
    delta,
    env_int,
    kueue_admission_baseline,
    load_average,
    parse_time,
    print_table,
    rate_figures,
    summary,
    total,
    wait,
    write_result,
)
from tests.bench.memory_snapshots import TRACEMALLOC_DIR, TRACEMALLOC_SECONDS
from tests.fixtures.slurm import started_cluster
from translators.slurm import LABEL_CLUSTER, LABEL_JOB_ID, jobset_name

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(5400)]


JOBS = env_int("K8S_BRIDGE_BENCH_JOBS", 1000)
LIVE_JOBS = env_int("K8S_BRIDGE_BENCH_LIVE_JOBS", JOBS // 5)
BASELINE_JOBS = env_int("K8S_BRIDGE_BENCH_BASELINE_JOBS", 200)
RELEASE_JOBS = env_int("K8S_BRIDGE_BENCH_RELEASE_JOBS", 50)
STEADY_SECONDS = float(os.environ.get("K8S_BRIDGE_BENCH_STEADY_SECONDS", "10"))
SUBMITTERS = 4
CHILD = Path(__file__).with_name("slurm_bridge_child.py")
BENCH_VERSIONS: list[SlurmVersion] = [
    v for v in VERSIONS if v in os.environ.get("K8S_BRIDGE_BENCH_SLURM", "22.05").split(",")
]

BRIDGE_ARGS = shlex.split(os.environ.get("K8S_BRIDGE_BENCH_BRIDGE_ARGS", ""))
"""Extra ``python -m bridge.slurm`` flags, e.g. ``--max-concurrent-reconciles=16``."""
SCHEDULER_PARAMETERS = os.environ.get("K8S_BRIDGE_BENCH_SCHEDULER_PARAMETERS")
"""slurm.conf ``SchedulerParameters`` instead of the stack's (``""``: Slurm's defaults)."""

TRUE_SCRIPT = "#!/bin/sh\ntrue\n"


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BENCH_VERSIONS, ids=[f"slurm-{v}" for v in BENCH_VERSIONS])
def bench_slurm(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    """A Slurm cluster with room for the release test's dynamic nodes (MaxJobCount: Slurm's 10000)."""
    version: SlurmVersion = request.param
    cluster = SlurmCluster(version=version, max_nodes=max(64, RELEASE_JOBS + 16))
    if SCHEDULER_PARAMETERS is not None:
        cluster.scheduler_parameters = SCHEDULER_PARAMETERS
    yield from started_cluster(cluster)


class BenchStack(E2EStack):
    """The e2e wiring with the WorkloadMixing's limits raised for the benchmark."""

    def __init__(self, *, max_bridged_jobs: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_bridged_jobs = max_bridged_jobs

    def mixing_spec_dict(self) -> dict[str, Any]:
        spec = super().mixing_spec_dict()
        spec["slurm"]["limits"] = {"maxNodesPerJob": 16, "maxBridgedJobs": self.max_bridged_jobs}
        return spec


@contextlib.contextmanager
def bench_stack(
    kube: KubeStack, slurm: SlurmCluster, workdir: Path, settings: E2ESettings, *, max_bridged_jobs: int
) -> Iterator[BenchStack]:
    stack = BenchStack(
        kube=kube, slurm=slurm, workdir=workdir, settings=settings, max_bridged_jobs=max_bridged_jobs
    )
    try:
        stack.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"bench stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"bench stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        for bridge in stack.bridges:
            bridge.stop(grace=10.0)
        scrub(stack)
        stack.stop()


def scrub(stack: E2EStack) -> None:
    """Leave nothing behind (as tests/e2e/conftest.py's scrub): jobs cancelled, bridge nodes deleted,
    JobSets without finalizers deleted. Uses the cluster's private ``_run`` for scancel, as e2e does."""
    with contextlib.suppress(StackError):
        stack.slurm._run(["scancel", f"--partition={BRIDGE_PARTITION}"])
    for name in stack.slurm_nodes():
        stack.slurm.scontrol("update", f"nodename={name}", "state=down", "reason=bench scrub", check=False)
        stack.slurm.scontrol("delete", f"nodename={name}", check=False)
    ns = stack.settings.namespace
    for jobset in stack.jobsets():
        path = f"{JOBSETS}/namespaces/{ns}/jobsets/{jobset['metadata']['name']}"
        with contextlib.suppress(StackError):
            if jobset["metadata"].get("finalizers"):
                stack.client.request(
                    "PATCH",
                    path,
                    body={"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
            stack.client.delete(path)


# --- measuring -----------------------------------------------------------------------------------

REST_COUNT = "k8s_bridge_slurmrestd_request_duration_seconds_count"
REST_SUM = "k8s_bridge_slurmrestd_request_duration_seconds_sum"
ACTIONS = "k8s_bridge_slurm_actions_total"


@dataclass(frozen=True)
class Probe(BridgeProbe):
    """A snapshot of the Slurm bridge, with its slurmrestd calls."""

    ACTIONS: ClassVar[str] = ACTIONS

    def kube(self) -> dict[str, float]:
        return {k: v for k, v in self.http().items() if k.startswith("kube ")}

    def rest(self) -> dict[str, float]:
        return by_labels(self.samples, REST_COUNT, ("method", "path"))

    def rest_seconds(self) -> dict[str, float]:
        return by_labels(self.samples, REST_SUM, ("method", "path"))


def window(before: Probe, after: Probe, *, jobs: int) -> dict[str, Any]:
    """What the bridge did between two probes, per job where that means something."""
    seconds = after.at - before.at
    kube = delta(after.kube(), before.kube())
    rest = delta(after.rest(), before.rest())
    rest_time = delta(after.rest_seconds(), before.rest_seconds())
    kube_calls = sum(kube.values())
    rest_calls = sum(rest.values())
    job_polls = sum(v for k, v in rest.items() if k.startswith("GET ") and k.endswith("/jobs"))
    apiserver = after.apiserver - before.apiserver
    cpu = after.cpu - before.cpu
    return {
        "seconds": round(seconds, 3),
        "jobs": jobs,
        "kube_calls": int(kube_calls),
        "kube_calls_per_job": round(kube_calls / jobs, 2) if jobs else None,
        "kube_calls_per_s": round(kube_calls / seconds, 2),
        "kube_calls_by_verb": {k.removeprefix("kube "): int(v) for k, v in kube.items()},
        "apiserver_requests_all_clients": None if math.isnan(apiserver) else int(apiserver),
        "apiserver_requests_all_clients_per_job": (
            round(apiserver / jobs, 1) if jobs and not math.isnan(apiserver) else None
        ),
        "rest_calls": int(rest_calls),
        "rest_calls_per_job": round(rest_calls / jobs, 2) if jobs else None,
        "rest_job_polls": int(job_polls),
        "rest_calls_per_job_poll": round(rest_calls / job_polls, 2) if job_polls else None,
        "rest_calls_by_path": {k: int(v) for k, v in rest.items()},
        "rest_mean_ms_by_path": {k: round(1000 * rest_time.get(k, 0.0) / v, 1) for k, v in rest.items() if v},
        "actions": {k: int(v) for k, v in delta(after.actions(), before.actions()).items()},
        "cpu_seconds": round(cpu, 2),
        "cpu_percent": round(100 * cpu / seconds, 1),
        "cpu_ms_per_job": round(1000 * cpu / jobs, 2) if jobs else None,
        "rss_mib": round(after.rss, 1),
        "peak_rss_mib": round(after.hwm, 1),
    }


# --- Slurm and Kubernetes helpers ----------------------------------------------------------------


def submit_many(
    cluster: SlurmCluster, count: int, *, prefix: str, script: str = TRUE_SCRIPT, options: Sequence[str] = ()
) -> tuple[list[int], float]:
    """Submit ``count`` held 1-node jobs with four sbatch processes at a time; (ids, seconds)."""

    def one(index: int) -> int:
        return cluster.sbatch(
            "-N1", "--ntasks=1", "--mem=100", "--time=10", f"--job-name={prefix}-{index}", *options,
            script=script,
        )  # fmt: skip

    began = time.monotonic()
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        ids = list(pool.map(one, range(count)))
    return ids, time.monotonic() - began


def cancel_all(cluster: SlurmCluster) -> None:
    """``scancel --partition=bridge`` as root (the cluster's private ``_run``, as tests/e2e does)."""
    cluster._run(["scancel", f"--partition={BRIDGE_PARTITION}"])


def counting_bridge(stack: E2EStack) -> BridgeProcess:
    """The bridge run through ``slurm_bridge_child.py`` (same arguments; every HTTP request counted)."""
    bridge = stack.bridge(*BRIDGE_ARGS)
    assert bridge.argv[1:3] == ["-m", "bridge.slurm"], bridge.argv
    bridge.argv[1:3] = [str(CHILD)]
    if PROFILE_DIR:
        Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)
        bridge.env["K8S_BRIDGE_BENCH_PROFILE"] = PROFILE_DIR
    if TRACEMALLOC_DIR:
        bridge.env["K8S_BRIDGE_BENCH_TRACEMALLOC"] = TRACEMALLOC_DIR
        bridge.env["K8S_BRIDGE_BENCH_TRACEMALLOC_SECONDS"] = str(TRACEMALLOC_SECONDS)
    return bridge


def profile_phase(bridge: BridgeProcess, result: dict[str, Any], phase: str, *, jobs: int) -> None:
    """With ``K8S_BRIDGE_BENCH_PROFILE`` set: the phase's profiled CPU by component, and ms per job."""
    assert bridge.process is not None
    split = end_phase(bridge.process.pid, phase)
    if split is None:
        return
    split["profiled_ms_per_job"] = round(1000 * split["profiled_seconds"] / jobs, 2)
    result.setdefault("profile", {})[phase] = split


def wait_bridge(bridge: BridgeProcess) -> None:
    def ready() -> bool:
        assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
        return bridge.metrics_text() is not None

    wait(ready, timeout=60, what="the bridge to serve /metrics")


def jobset_count(stack: E2EStack) -> int:
    path = f"{JOBSETS}/namespaces/{stack.settings.namespace}/jobsets"
    items = stack.list_items(path, labelSelector=f"{LABEL_CLUSTER}={stack.cluster_name}")
    return len(items)


def any_jobset(stack: E2EStack) -> bool:
    path = f"{JOBSETS}/namespaces/{stack.settings.namespace}/jobsets"
    return bool(stack.list_items(path, labelSelector=f"{LABEL_CLUSTER}={stack.cluster_name}", limit="1"))


def creates(bridge: BridgeProcess) -> float:
    return bridge.metric(ACTIONS, action="create_jobset", result="ok")


def wait_creates(bridge: BridgeProcess, target: float, *, timeout: float) -> list[tuple[float, float]]:
    """Poll the bridge's create counter until it reaches ``target``; the (monotonic time, count) series."""
    series: list[tuple[float, float]] = []
    deadline = time.monotonic() + timeout
    while True:
        assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
        count = creates(bridge)
        series.append((time.monotonic(), count))
        if count >= target:
            return series
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{count:.0f} of {target:.0f} JobSets after {timeout:.0f}s\n{bridge.log_tail()}"
            )
        time.sleep(0.25)


# --- 1: throughput -------------------------------------------------------------------------------


def test_held_jobs_to_jobsets_beside_kueue_admission(
    kube_stack: KubeStack, bench_slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = E2ESettings(
        pool="bench-a", runner_nodes=1, kwok_nodes=2, quota_cpu="0", quota_memory="0",
        namespace="bench-a", slurm_priority="bench-slurm", urgent_priority="bench-urgent",
    )  # fmt: skip
    workdir = tmp_path_factory.mktemp(f"bench-a-{bench_slurm.version}")
    result: dict[str, Any] = {
        "slurm": bench_slurm.package_version,
        "rest": bench_slurm.rest_version,
        "bridge_args": BRIDGE_ARGS,
    }
    with bench_stack(
        kube_stack, bench_slurm, workdir, settings, max_bridged_jobs=JOBS + LIVE_JOBS + 100
    ) as stack:
        # 1. Kueue's own admission rate.
        key, value = stack.settings.pool_label
        baseline = kueue_admission_baseline(stack.kube, BASELINE_JOBS, node_labels={key: f"{value}-kwok"})
        result["kueue_baseline"] = baseline

        # 2. Catch-up: held jobs first, then the bridge.
        ids, submit_seconds = submit_many(bench_slurm, JOBS, prefix="held")
        assert len(set(ids)) == JOBS
        result["submit"] = {"jobs": JOBS, "seconds": round(submit_seconds, 2),
                            "per_s": round(JOBS / submit_seconds, 1), "parallel": SUBMITTERS}  # fmt: skip
        bridge = counting_bridge(stack)
        zero = Probe.before_start(stack.client)
        start = zero.at
        bridge.start()
        wait_bridge(bridge)
        started = time.monotonic() - start
        series = wait_creates(bridge, JOBS, timeout=max(300.0, JOBS * 1.0))
        after = Probe.take(stack.client, bridge)
        profile_phase(bridge, result, "create", jobs=JOBS)
        assert jobset_count(stack) == JOBS
        catch_up = rate_figures(series, start=start, base=0.0, count=JOBS)
        catch_up["bridge_start_seconds"] = round(started, 2)
        # From the bridge's start (its start-up lists, watches and discovery included).
        catch_up["since_start"] = window(zero, after, jobs=JOBS)
        # One window rule on both sides: middle 80% against middle 80%, whole against whole.
        catch_up["ratio_to_kueue_admission"] = round(
            catch_up["per_s_middle_80pct"] / baseline["admissions_per_s_middle_80pct"], 2
        )
        catch_up["ratio_to_kueue_admission_whole"] = round(
            catch_up["per_s_overall"] / baseline["admissions_per_s"], 2
        )
        result["catch_up"] = catch_up

        # 3. Steady state: nothing changes; what does the bridge cost per poll?
        time.sleep(2.0)
        profile_phase(bridge, result, "settle", jobs=JOBS)
        quiet = Probe.take(stack.client, bridge)
        time.sleep(STEADY_SECONDS)
        result["steady"] = window(quiet, Probe.take(stack.client, bridge), jobs=JOBS)
        profile_phase(bridge, result, "steady", jobs=JOBS)

        # 4. Live: submitted while the bridge runs.
        if LIVE_JOBS:
            base = creates(bridge)
            live_before = Probe.take(stack.client, bridge)
            start = time.monotonic()
            with ThreadPoolExecutor(1) as pool:
                submitted = pool.submit(submit_many, bench_slurm, LIVE_JOBS, prefix="live")
                series = wait_creates(bridge, base + LIVE_JOBS, timeout=max(300.0, LIVE_JOBS * 1.0))
                live_ids, live_submit_seconds = submitted.result()
            assert len(set(live_ids)) == LIVE_JOBS
            live = rate_figures(series, start=start, base=base, count=LIVE_JOBS)
            live["submit_seconds"] = round(live_submit_seconds, 2)
            live["lag_after_last_submit_seconds"] = round(live["seconds_to_all"] - live_submit_seconds, 2)
            live["window"] = window(live_before, Probe.take(stack.client, bridge), jobs=LIVE_JOBS)
            result["live"] = live
            profile_phase(bridge, result, "live", jobs=LIVE_JOBS)
            assert jobset_count(stack) == JOBS + LIVE_JOBS

        # 5. Cleanup: cancel everything; the bridge deletes every JobSet.
        everything = JOBS + LIVE_JOBS
        clean_before = Probe.take(stack.client, bridge)
        removed = clean_before.actions().get("remove_finalizer ok", 0.0)
        start = time.monotonic()
        cancel_all(bench_slurm)
        wait(
            lambda: bridge.metric(ACTIONS, action="remove_finalizer", result="ok") - removed >= everything,
            timeout=max(600.0, everything * 1.0), what="the bridge to remove every finalizer", interval=0.5,
        )  # fmt: skip
        bridge_done = time.monotonic() - start
        clean_after = Probe.take(stack.client, bridge)
        profile_phase(bridge, result, "cleanup", jobs=everything)
        wait(lambda: not any_jobset(stack), timeout=max(600.0, everything * 1.0),
             what="every JobSet to be gone", interval=1.0)  # fmt: skip
        seconds = time.monotonic() - start
        result["cleanup"] = {
            "jobs": everything,
            "bridge_done_seconds": round(bridge_done, 2),
            "bridge_per_s": round(everything / bridge_done, 1),
            "all_gone_seconds": round(seconds, 2),
            "window": window(clean_before, clean_after, jobs=everything),
        }
        assert bridge.alive(), bridge.log_tail()

    report_throughput(result)
    write_result(f"throughput-{bench_slurm.version}", result)


def report_throughput(r: dict[str, Any]) -> None:
    b, c, s = r["kueue_baseline"], r["catch_up"], r["steady"]
    w = c["since_start"]
    rows: list[tuple[str, Any]] = [
        ("Slurm / REST / extra bridge flags", f"{r['slurm']} / {r['rest']} / {r['bridge_args']}"),
        ("Kueue baseline (watch): admissions/s (middle 80% / whole)",
         f"{b['admissions_per_s_middle_80pct']} / {b['admissions_per_s']} "
         f"({b['jobs']} Jobs in {b['seconds']} s)"),
        ("sbatch --hold, 4 parallel: jobs/s", f"{r['submit']['per_s']} ({r['submit']['jobs']} in "
                                              f"{r['submit']['seconds']} s)"),
        ("catch-up: bridge start -> all JobSets", f"{c['seconds_to_all']} s ({w['jobs']} jobs; first "
                                                 f"after {c['seconds_to_first']} s)"),
        ("catch-up: JobSets/s (middle 80% / overall)", f"{c['per_s_middle_80pct']} / {c['per_s_overall']}"),
        ("bridge JobSets/s / Kueue admissions/s (middle 80% / whole)",
         f"{c['ratio_to_kueue_admission']} / {c['ratio_to_kueue_admission_whole']}"),
        ("catch-up: Kubernetes calls per job (bridge)",
         f"{w['kube_calls_per_job']}  {w['kube_calls_by_verb']}"),
        ("catch-up: API server requests per job (all)", w["apiserver_requests_all_clients_per_job"]),
        ("catch-up: slurmrestd calls per job", f"{w['rest_calls_per_job']}  {w['rest_calls_by_path']}"),
        ("catch-up: bridge CPU s (ms per job)", f"{w['cpu_seconds']} ({w['cpu_ms_per_job']})"),
        ("catch-up: bridge RSS / peak RSS MiB", f"{w['rss_mib']} / {w['peak_rss_mib']}"),
        (f"steady {s['seconds']} s: slurmrestd calls per job poll",
         f"{s['rest_calls_per_job_poll']}  {s['rest_calls_by_path']}"),
        ("steady: slurmrestd mean ms by path", s["rest_mean_ms_by_path"]),
        ("steady: Kubernetes calls/s (bridge)", s["kube_calls_per_s"]),
        ("steady: bridge CPU %", s["cpu_percent"]),
    ]  # fmt: skip
    if "live" in r:
        live = r["live"]
        rows += [
            ("live: first sbatch -> all JobSets", f"{live['seconds_to_all']} s (submitting took "
                                                  f"{live['submit_seconds']} s; lag "
                                                  f"{live['lag_after_last_submit_seconds']} s)"),
            ("live: Kubernetes / slurmrestd calls per job", f"{live['window']['kube_calls_per_job']} / "
                                                            f"{live['window']['rest_calls_per_job']}"),
        ]  # fmt: skip
    cl = r["cleanup"]
    rows += [
        ("cleanup: scancel -> bridge done (finalizers off)", f"{cl['bridge_done_seconds']} s "
                                                              f"({cl['bridge_per_s']} jobs/s)"),
        ("cleanup: scancel -> every JobSet gone (GC)", f"{cl['all_gone_seconds']} s"),
        ("cleanup: Kubernetes / slurmrestd calls per job", f"{cl['window']['kube_calls_per_job']} / "
                                                           f"{cl['window']['rest_calls_per_job']}"),
        ("end: bridge RSS / peak RSS MiB", f"{cl['window']['rss_mib']} / {cl['window']['peak_rss_mib']}"),
    ]  # fmt: skip
    for phase, split in r.get("profile", {}).items():
        rows.append((f"profile {phase}: own CPU s ({split['profiled_ms_per_job']} ms/job)",
                     f"{split['profiled_seconds']}  {split['by_component_seconds']}"))  # fmt: skip
    print_table("Slurm bridge throughput (held jobs -> JobSets)", rows)


# --- 2: release latency --------------------------------------------------------------------------


def slurm_nodes_and_jobs(cluster: SlurmCluster) -> tuple[dict[str, str], dict[int, tuple[str, str]]]:
    """({node: State}, {job id: (JobState, StartTime)}) from scontrol."""
    nodes: dict[str, str] = {}
    for line in cluster.scontrol("show", "nodes", "--oneliner", check=False).splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields.get("State", "")
    jobs: dict[int, tuple[str, str]] = {}
    for line in cluster.scontrol("show", "jobs", "--oneliner", check=False).splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("JobId", "").isdigit():
            jobs[int(fields["JobId"])] = (fields.get("JobState", ""), fields.get("StartTime", ""))
    return nodes, jobs


TIGHT_POLL_SECONDS = float(os.environ.get("K8S_BRIDGE_BENCH_TIGHT_POLL", "0.02"))
"""Pause between two rounds of the release-latency observer (each round also takes its requests)."""


def _rest_states(value: Any, flags: Any = ()) -> set[str]:
    """A job or node state as a set of upper-case words: a string in v0.0.38, a list in v0.0.40+."""
    words = [value] if isinstance(value, str) else list(value or ())
    return {str(w).upper() for w in [*words, *(flags or ())]}


class ReleaseObserver:
    """When each job's node registered IDLE and when the job was RUNNING, to ~20 ms, from slurmrestd.

    Why a thread of its own: the main observation loop lists JobSets, Workloads and (through
    ``scontrol`` subprocesses) Slurm's nodes and jobs; under load one round takes ~0.5 s, as long as
    what is measured. This loop reads only what the release latency needs, over slurmrestd with a
    SlurmUser token and a fresh connection per request: ``GET /nodes`` while some job's node has not
    been seen IDLE, and ``GET /job/<id>`` for each job whose node is up but which was not seen RUNNING
    yet; then it pauses ``TIGHT_POLL_SECONDS``. A time is the wall clock when the first answer showing
    the state arrived, so each is late by at most one round (``round_seconds``); both ends of a
    figure are read the same way, so their lags partly cancel. A node seen ALLOCATED or MIXED without
    having been seen IDLE (registered and taken within one round) is counted in ``missed`` and left
    out of the figures.
    """

    def __init__(self, cluster: SlurmCluster, jobs: Sequence[int]) -> None:
        self._base = f"{cluster.rest_url}/slurm/{cluster.rest_version}"
        self._headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": cluster.token(lifespan=7200)}
        self.jobs = list(jobs)
        self.idle: dict[int, float] = {}
        self.running: dict[int, float] = {}
        self.start_time: dict[int, float] = {}
        self.missed: set[int] = set()
        self.rounds = 0
        self.requests = 0
        self.errors: list[str] = []
        self._began = 0.0
        self._ended = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="release-observer", daemon=True)

    @property
    def round_seconds(self) -> float:
        return (self._ended - self._began) / self.rounds if self.rounds else math.nan

    def start(self) -> ReleaseObserver:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def done(self) -> bool:
        return all(j in self.running or j in self.missed for j in self.jobs)

    def _get(self, path: str) -> dict[str, Any]:
        self.requests += 1
        request = urllib.request.Request(f"{self._base}/{path}", headers=self._headers)
        with urllib.request.urlopen(request, timeout=30) as reply:
            data: dict[str, Any] = json.loads(reply.read())
        return data

    def _round(self) -> None:
        waiting_idle = [j for j in self.jobs if j not in self.idle and j not in self.missed]
        if waiting_idle:
            nodes = {n["name"]: n for n in self._get("nodes").get("nodes") or ()}
            now = time.time()
            for job_id in waiting_idle:
                node = nodes.get(f"b{job_id}-0")
                if node is None:
                    continue
                states = _rest_states(node.get("state"), node.get("state_flags"))
                if states & {"ALLOCATED", "MIXED"}:
                    self.missed.add(job_id)
                elif "IDLE" in states:
                    self.idle[job_id] = now
        for job_id in [j for j in self.jobs if j in self.idle and j not in self.running]:
            jobs = self._get(f"job/{job_id}").get("jobs") or ()
            now = time.time()
            if jobs and _rest_states(jobs[0].get("job_state")) & {"RUNNING", "COMPLETING", "COMPLETED"}:
                self.running[job_id] = now
                raw = jobs[0].get("start_time")
                with contextlib.suppress(TypeError, ValueError, KeyError):
                    self.start_time[job_id] = float(raw["number"] if isinstance(raw, dict) else raw)

    def _run(self) -> None:
        while not self._stop.is_set() and not self.done():
            try:
                self._round()
            except (OSError, ValueError) as exc:  # keep observing; report what went wrong
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.rounds += 1
            self._ended = time.monotonic()
            self._stop.wait(TIGHT_POLL_SECONDS)


def test_admission_to_running_latency(
    kube_stack: KubeStack, bench_slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    count = RELEASE_JOBS
    settings = E2ESettings(
        pool="bench-b", runner_nodes=2, runner_cpu=str(count + 8), runner_memory="64Gi", kwok_nodes=0,
        quota_cpu=str(count + 4), quota_memory="64Gi", namespace="bench-b",
        slurm_priority="bench-slurm", urgent_priority="bench-urgent",
    )  # fmt: skip
    workdir = tmp_path_factory.mktemp(f"bench-b-{bench_slurm.version}")
    result: dict[str, Any] = {
        "slurm": bench_slurm.package_version,
        "rest": bench_slurm.rest_version,
        "scheduler_parameters": bench_slurm.scheduler_parameters or "(Slurm defaults)",
        "bridge_args": BRIDGE_ARGS,
        "load_before": load_average(),
    }
    with bench_stack(kube_stack, bench_slurm, workdir, settings, max_bridged_jobs=count + 100) as stack:
        bridge = counting_bridge(stack)
        bridge.start()
        wait_bridge(bridge)
        cluster = stack.cluster_name
        profile_phase(bridge, result, "latency-start-up", jobs=1)
        ids, submit_seconds = submit_many(bench_slurm, count, prefix="rel", script="#!/bin/sh\nsleep 5\n")
        want = set(ids)
        names = {jobset_name(cluster, j): j for j in ids}
        uid_to_job: dict[str, int] = {}
        admitted: dict[int, float] = {}
        admitted_ltt: dict[int, float] = {}
        loops, began = 0, time.monotonic()
        deadline = began + max(300.0, 6.0 * count)
        before = Probe.take(stack.client, bridge)
        observer = ReleaseObserver(bench_slurm, ids).start()
        try:
            # The slow loop: Kueue's admissions (for Admitted -> ...); the observer does the rest.
            while not observer.done():
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{len(observer.running)} of {count} jobs seen RUNNING ({len(admitted)} admitted, "
                        f"{len(observer.idle)} nodes idle; observer errors {observer.errors[-3:]})\n"
                        f"{bridge.log_tail()}"
                    )
                loops += 1
                if len(uid_to_job) < count:
                    for js in stack.jobsets():
                        label = js["metadata"].get("labels", {}).get(LABEL_JOB_ID, "")
                        if label.isdigit() and int(label) in want:
                            uid_to_job[js["metadata"]["uid"]] = int(label)
                now = time.time()
                for wl in stack.workloads():
                    job_id = uid_to_job.get(wl["metadata"].get("labels", {}).get(JOB_UID_LABEL, ""))
                    if job_id is None or job_id in admitted:
                        continue
                    if describe_workload(wl).state in (WorkloadState.ADMITTED, WorkloadState.FINISHED):
                        admitted[job_id] = now
                        admitted_ltt[job_id] = condition_time(wl, "Admitted") or math.nan
                time.sleep(0.1)
        finally:
            observer.stop()
        # Submitted -> every job RUNNING: the create and the release of each job.
        profile_phase(bridge, result, "create+release", jobs=count)
        loop_seconds = (time.monotonic() - began) / max(loops, 1)
        during = window(before, Probe.take(stack.client, bridge), jobs=count)
        result["load_during"] = load_average()
        idle, running = observer.idle, observer.running

        # The bridge's release calls: its Released Events (eventTime has microseconds).
        released: dict[int, float] = {}
        events = stack.list_items(f"/apis/events.k8s.io/v1/namespaces/{settings.namespace}/events")
        for event in events:
            job_id = names.get(str(event.get("regarding", {}).get("name", "")))
            when = parse_time(str(event.get("eventTime") or ""))
            if event.get("reason") == "Released" and job_id is not None and when is not None:
                released[job_id] = min(when, released.get(job_id, when))

        # When the bridge decided to release (its "reconciling" log line, after the fresh read of
        # the job, before the pin-and-release call): splits its share into seeing the node and acting.
        decided = release_decisions(bridge.log_text(), want)

        def seg(a: dict[int, float], b: dict[int, float]) -> list[float]:
            return [b[j] - a[j] for j in ids if j in a and j in b and not math.isnan(a[j] - b[j])]

        stages = (("decided", decided), ("released", released), ("running", running))
        node_polls = sum(v for k, v in during["rest_calls_by_path"].items() if k.startswith("GET ") and
                         k.rstrip("/").endswith("/nodes"))  # fmt: skip
        result.update(
            jobs=count,
            submit_seconds=round(submit_seconds, 2),
            observation_loop_seconds=round(loop_seconds, 3),
            observer_round_seconds=round(observer.round_seconds, 4),
            observer_requests=observer.requests,
            observer_errors=observer.errors[-5:],
            node_idle_missed=len(observer.missed),
            node_idle_to_running=summary(seg(idle, running)),
            node_idle_to_released=summary(seg(idle, released)),
            released_to_running=summary(seg(released, running)),
            node_idle_to_release_decided=summary(seg(idle, decided)),
            release_decided_to_released=summary(seg(decided, released)),
            admitted_to_running=summary(seg(admitted, running)),
            admitted_to_node_idle=summary(seg(admitted, idle)),
            released_to_slurm_start_time=summary(seg(released, observer.start_time)),
            server_times_admitted_to_start=summary(seg(admitted_ltt, observer.start_time)),
            bridge_node_polls=int(node_polls),
            bridge_node_polls_per_s=round(node_polls / during["seconds"], 2),
            bridge_rest_calls_by_path=during["rest_calls_by_path"],
            bridge_rest_mean_ms_by_path=during["rest_mean_ms_by_path"],
            per_job_after_node_idle=[
                {"job": j, **{f"{name}_s": round(at[j] - idle[j], 3) for name, at in stages if j in at}}
                for j in ids
                if j in idle
            ],
        )

        # Every job completes and is cleaned up (nothing timed here beyond the total).
        start = time.monotonic()
        wait(lambda: not any_jobset(stack), timeout=max(300.0, 4.0 * count),
             what="every JobSet to be cleaned up after the jobs", interval=1.0)  # fmt: skip
        result["cleanup_after_running_seconds"] = round(time.monotonic() - start, 2)
        profile_phase(bridge, result, "completion+cleanup", jobs=count)
        _, jobs = slurm_nodes_and_jobs(bench_slurm)
        result["completed"] = sum(jobs.get(j, ("",))[0] == "COMPLETED" for j in ids)
        probe = Probe.take(stack.client, bridge)
        result["bridge_histogram_admitted_to_running"] = histogram_summary(
            probe.samples, "k8s_bridge_slurm_admitted_to_running_seconds"
        )
        result["bridge"] = {"cpu_seconds": round(probe.cpu, 2), "peak_rss_mib": round(probe.hwm, 1)}
        result["reconcile_workers"] = int(
            total(probe.samples, "controller_runtime_max_concurrent_reconciles", controller="slurm")
        )
        result["load_after"] = load_average()
        assert bridge.alive(), bridge.log_tail()

    report_latency(result)
    write_result(f"latency-{bench_slurm.version}", result)


def release_decisions(log_text: str, jobs: set[int]) -> dict[int, float]:
    """Per job, the first time the bridge logged its decision to pin and release it (JSON log lines)."""
    decided: dict[int, float] = {}
    for line in log_text.splitlines():
        if '"reconciling"' not in line or "releasing" not in line:
            continue
        with contextlib.suppress(ValueError, TypeError):
            entry = json.loads(line)
            job_id = int(entry.get("job_id"))
            when = parse_time(str(entry.get("timestamp", "")))
            if job_id in jobs and entry.get("phase") == "releasing" and when is not None:
                decided.setdefault(job_id, when)
    return decided


def histogram_summary(samples: Sequence[Sample], name: str) -> dict[str, Any]:
    """count, mean and bucket-bounded p50/p90 (the upper bound of the bucket holding the quantile)."""
    count = total(samples, f"{name}_count")
    if not count:
        return {"n": 0}
    buckets = sorted(
        (float(lab["le"]), v) for n, lab, v in samples if n == f"{name}_bucket" and lab.get("le") != "+Inf"
    )

    def bound(q: float) -> float | None:
        return next((le for le, c in buckets if c >= q * count), None)

    return {
        "n": int(count),
        "mean": round(total(samples, f"{name}_sum") / count, 3),
        "p50_le": bound(0.5),
        "p90_le": bound(0.9),
    }


def report_latency(r: dict[str, Any]) -> None:
    def fmt(s: dict[str, Any]) -> str:
        return f"p50 {s['p50']} s  p90 {s['p90']} s  max {s['max']} s  (n={s['n']})"

    h = r["bridge_histogram_admitted_to_running"]
    rows: list[tuple[str, Any]] = [
        ("Slurm / REST / extra bridge flags", f"{r['slurm']} / {r['rest']} / {r['bridge_args']}"),
        ("SchedulerParameters / reconcile workers", f"{r['scheduler_parameters']} / "
                                                    f"{r['reconcile_workers']}"),
        ("jobs (1 node, 1 CPU, quota for all)", r["jobs"]),
        ("node IDLE -> RUNNING (release latency)", fmt(r["node_idle_to_running"])),
        ("  node IDLE -> released (bridge)", fmt(r["node_idle_to_released"])),
        ("    node IDLE -> release decided (seen, queued, read)", fmt(r["node_idle_to_release_decided"])),
        ("    release decided -> released (the call)", fmt(r["release_decided_to_released"])),
        ("  released -> RUNNING (Slurm)", fmt(r["released_to_running"])),
        ("Admitted -> RUNNING", fmt(r["admitted_to_running"])),
        ("  Admitted -> node registered IDLE", fmt(r["admitted_to_node_idle"])),
        ("released -> Slurm StartTime (1 s res.)", fmt(r["released_to_slurm_start_time"])),
        ("server times: Admitted -> StartTime (1 s res.)", fmt(r["server_times_admitted_to_start"])),
        ("bridge histogram Admitted -> RUNNING", f"mean {h.get('mean')} s  p50 <= {h.get('p50_le')} s  "
                                                 f"p90 <= {h.get('p90_le')} s  (n={h['n']})"),
        ("bridge node polls (GET nodes)", f"{r['bridge_node_polls']} ({r['bridge_node_polls_per_s']}/s)"),
        ("release observer round", f"{r['observer_round_seconds']} s ({r['observer_requests']} requests); "
                                   f"node IDLE missed for {r['node_idle_missed']} jobs"),
        ("admission loop period", f"{r['observation_loop_seconds']} s"),
        ("load average before / during / after", f"{r['load_before']} / {r['load_during']} / "
                                                 f"{r['load_after']}"),
        ("completed / cleanup after", f"{r['completed']} / {r['cleanup_after_running_seconds']} s"),
        ("bridge CPU s / peak RSS MiB", f"{r['bridge']['cpu_seconds']} / {r['bridge']['peak_rss_mib']}"),
    ]  # fmt: skip
    for phase, split in r.get("profile", {}).items():
        rows.append((f"profile {phase}: own CPU s ({split['profiled_ms_per_job']} ms/job)",
                     f"{split['profiled_seconds']}  {split['by_component_seconds']}"))  # fmt: skip
    print_table("Slurm bridge release latency (node registered IDLE -> job RUNNING)", rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-s", "-p", "no:cacheprovider"]))
