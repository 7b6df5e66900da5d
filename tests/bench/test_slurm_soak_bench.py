"""The Slurm bridge at steady state with a deep queue, on the real stack: what it costs over time.

Why a soak beside the throughput benchmark: a site's ordinary state is a deep Slurm queue, a few
jobs running at a time and jobs ending all the time; what matters there is what a bridge that mostly
waits costs, whether that grows with the queue's length or with time, and how fast it cleans up when
a user cancels everything (``scancel -u someone``). The throughput benchmark measures bursts.

``K8S_BRIDGE_SOAK_QUEUED`` (300) held 1-node, 1-CPU jobs of ``sleep K8S_BRIDGE_SOAK_JOB_SECONDS``
(5) wait in Kueue with quota for ``K8S_BRIDGE_SOAK_RUNNING`` (10) at a time, on process-runner nodes
(real slurmd pods). After the bridge has made every JobSet and caught up (every hold turned into its
admin hold, every job's first comment written: five comments a second, so 200 s for 1,000 jobs; the
time is printed; the queue is kept as deep meanwhile), for ``K8S_BRIDGE_SOAK_SECONDS`` (150),
sampled every ``K8S_BRIDGE_SOAK_SAMPLE_SECONDS`` (15), the queue topped up every 5 s so that it stays
that long. Each sample prints:

- completions per minute (jobs submitted minus jobs slurmctld still lists as active, from ``squeue``);
- the bridge's CPU (utime + stime, share of one core), its children's (``scontrol`` on 22.05: cutime +
  cstime) and its RSS; slurmctld's and slurmrestd's RSS;
- requests per second the bridge sent to slurmrestd and to the API server, and the TCP connections it
  opened to slurmrestd (``slurm_bridge_child.py`` counts both), and every client's requests per
  second to the API server (``apiserver_request_total``);
- Slurm jobs the bridge parsed per second (``RestAdapter.parse_job``): proportional to the queue when
  every poll parses every job, to the changes when it parses only what changed.

Then every job of the bridge partition is cancelled at once (queued and running) and the times until
no JobSet, no pod and no bridge Slurm node is left are printed, with the most JobSets seen waiting
on the garbage collector's foreground deletion (``foregroundDeletion`` finalizer) at any moment.

Asserts only that work was done (jobs completed, everything cleaned up), never a time. One Slurm
version (``K8S_BRIDGE_BENCH_SLURM``, default 22.05; ``22.05,24.11`` runs both).
``K8S_BRIDGE_BENCH_BRIDGE_ARGS`` adds bridge flags; ``K8S_BRIDGE_BENCH_PROFILE=<dir>`` profiles the
bridge and prints its CPU by part for the fill and the steady phases (``bench_profile.py``);
``K8S_BRIDGE_BENCH_RESULTS=<dir>`` writes the figures as JSON. Run:
``pytest tests/bench/test_slurm_soak_bench.py -s -p no:cacheprovider``; the issue's scale:
``K8S_BRIDGE_SOAK_QUEUED=2000 K8S_BRIDGE_SOAK_RUNNING=20 K8S_BRIDGE_SOAK_SECONDS=600``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.e2e import E2ESettings
from bridge.sandbox.processes import StackError
from bridge.sandbox.slurm import BRIDGE_PARTITION, VERSIONS, SlurmCluster, SlurmVersion
from bridge.sandbox.stack import KubeStack
from tests.bench.bench_support import (
    HTTP_COUNT,
    apiserver_requests,
    by_labels,
    children_cpu_seconds,
    cpu_seconds,
    delta,
    env_int,
    load_average,
    memory_mib,
    parse_metrics,
    print_table,
    total,
    wait,
    write_result,
)
from tests.bench.test_slurm_bridge_bench import (
    ACTIONS,
    BRIDGE_ARGS,
    REST_COUNT,
    bench_stack,
    cancel_all,
    counting_bridge,
    jobset_count,
    profile_phase,
    slurm_nodes_and_jobs,
    submit_many,
    wait_bridge,
)
from tests.fixtures.slurm import started_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(7200)]

QUEUED = env_int("K8S_BRIDGE_SOAK_QUEUED", 300)
RUNNING = env_int("K8S_BRIDGE_SOAK_RUNNING", 10)
SOAK_SECONDS = float(os.environ.get("K8S_BRIDGE_SOAK_SECONDS", "150"))
SAMPLE_SECONDS = float(os.environ.get("K8S_BRIDGE_SOAK_SAMPLE_SECONDS", "15"))
JOB_SECONDS = env_int("K8S_BRIDGE_SOAK_JOB_SECONDS", 5)
TOP_UP_SECONDS = 5.0
"""Seconds between top-ups of the queue: as many jobs as ended are submitted, a few at a time."""
CLEANUP_TIMEOUT = float(os.environ.get("K8S_BRIDGE_SOAK_CLEANUP_TIMEOUT", "900"))
"""Seconds the mass cancel's cleanup is waited for; what is not gone by then is reported, then fails."""
SOAK_VERSIONS: list[SlurmVersion] = [
    v for v in VERSIONS if v in os.environ.get("K8S_BRIDGE_BENCH_SLURM", "22.05").split(",")
]
PARSED = "k8s_bridge_bench_slurm_jobs_parsed_total"
EVENTS = "k8s_bridge_bench_events_total"
CONNECTIONS = "k8s_bridge_bench_http_connections_total"
ACTIVE_STATES = "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED,RESIZING"


@pytest.fixture(scope="module", params=SOAK_VERSIONS, ids=[f"slurm-{v}" for v in SOAK_VERSIONS])
def soak_slurm(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    version: SlurmVersion = request.param
    cluster = SlurmCluster(version=version, max_nodes=max(64, 4 * RUNNING + 16))
    yield from started_cluster(cluster)


# --- reading the processes -------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def daemon_pid(root: int, name: str) -> int | None:
    """The process named ``name`` at or under ``root`` (the stack may start a daemon through a
    ``chroot``/``setpriv`` prefix that execs it, or that waits for it)."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                return pid
        except OSError:
            continue
        todo += _children(pid)
    return None


def daemon_pids(cluster: SlurmCluster) -> dict[str, int]:
    group = cluster._group
    assert group is not None
    pids: dict[str, int] = {}
    for process in group.processes:
        if process.name in ("slurmctld", "slurmrestd"):
            pid = daemon_pid(process.pid, process.name)
            if pid is not None:
                pids[process.name] = pid
    return pids


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return math.nan
    try:
        return memory_mib(pid)[0]
    except (OSError, KeyError):
        return math.nan


def active_jobs(cluster: SlurmCluster) -> tuple[int, int]:
    """(pending, running or ending) jobs of the bridge partition, from ``squeue`` (slurmctld, not REST)."""
    out = cluster._run(
        ["squeue", "-h", "-p", BRIDGE_PARTITION, "-t", ACTIVE_STATES, "-o", "%t"], check=False
    ).stdout.split()
    pending = sum(1 for state in out if state == "PD")
    return pending, len(out) - pending


def waiting_jobs(cluster: SlurmCluster) -> dict[int, tuple[bool, bool]]:
    """For each pending job of the bridge partition (``squeue``), by id: whether it is held by the
    admin (its user hold converted) and whether it has a comment (why it waits)."""
    out = cluster._run(["squeue", "-h", "-p", BRIDGE_PARTITION, "-t", "PD", "-o", "%i|%r|%k"], check=False)
    jobs: dict[int, tuple[bool, bool]] = {}
    for line in out.stdout.splitlines():
        job_id, _, rest = line.partition("|")
        reason, _, comment = rest.partition("|")
        if job_id.strip().isdigit():
            jobs[int(job_id)] = (reason.strip() != "JobHeldUser", comment.strip() not in ("", "(null)"))
    return jobs


@dataclass(frozen=True)
class Sample:
    at: float
    submitted: int
    pending: int
    active: int
    bridge_cpu: float
    children_cpu: float
    bridge_rss: float
    slurmctld_rss: float
    slurmrestd_rss: float
    rest_requests: float
    kube_requests: float
    rest_connections: float
    parsed: float
    apiserver: float
    rest_by_path: dict[str, float]
    kube_by_verb: dict[str, float]
    actions: dict[str, float]
    reconciles: float
    events: dict[str, float]

    @property
    def completed(self) -> int:
        return self.submitted - self.active

    @classmethod
    def take(cls, *, cluster: SlurmCluster, bridge_pid: int, metrics: str, submitted: int,
             daemons: dict[str, int], client: Any) -> Sample:  # fmt: skip
        samples = parse_metrics(metrics)
        http = by_labels(samples, HTTP_COUNT, ("target",))
        pending, running = active_jobs(cluster)
        return cls(
            at=time.monotonic(),
            submitted=submitted,
            pending=pending,
            active=pending + running,
            bridge_cpu=cpu_seconds(bridge_pid),
            children_cpu=children_cpu_seconds(bridge_pid),
            bridge_rss=memory_mib(bridge_pid)[0],
            slurmctld_rss=rss_mib(daemons.get("slurmctld")),
            slurmrestd_rss=rss_mib(daemons.get("slurmrestd")),
            rest_requests=total(samples, REST_COUNT),
            kube_requests=http.get("kube", 0.0),
            rest_connections=total(samples, CONNECTIONS, target="slurm"),
            parsed=total(samples, PARSED),
            apiserver=apiserver_requests(client),
            rest_by_path=by_labels(samples, REST_COUNT, ("method", "path")),
            kube_by_verb={
                k.removeprefix("kube "): v
                for k, v in by_labels(samples, HTTP_COUNT, ("target", "verb", "resource")).items()
                if k.startswith("kube ")
            },
            actions=by_labels(samples, ACTIONS, ("action", "result")),
            reconciles=total(samples, "controller_runtime_reconcile_total", controller="slurm"),
            events={
                k.removeprefix("slurm "): v
                for k, v in by_labels(samples, EVENTS, ("controller", "source", "counted")).items()
                if k.startswith("slurm ")
            },
        )


def interval(a: Sample, b: Sample, *, since: float) -> dict[str, Any]:
    seconds = b.at - a.at
    rest = b.rest_requests - a.rest_requests
    connections = b.rest_connections - a.rest_connections
    return {
        "minute": round((b.at - since) / 60, 2),
        "queued": b.pending,
        "completions_per_min": round(60 * (b.completed - a.completed) / seconds, 1),
        "bridge_cpu_cores": round((b.bridge_cpu - a.bridge_cpu) / seconds, 3),
        "bridge_children_cpu_cores": round((b.children_cpu - a.children_cpu) / seconds, 3),
        "bridge_rss_mib": round(b.bridge_rss, 1),
        "slurmctld_rss_mib": round(b.slurmctld_rss, 1),
        "slurmrestd_rss_mib": round(b.slurmrestd_rss, 1),
        "rest_per_s": round(rest / seconds, 2),
        "rest_connections": int(connections),
        "rest_requests_per_connection": round(rest / connections, 1) if connections else None,
        "kube_per_s_bridge": round((b.kube_requests - a.kube_requests) / seconds, 2),
        "apiserver_per_s_all": round((b.apiserver - a.apiserver) / seconds, 1),
        "jobs_parsed_per_s": round((b.parsed - a.parsed) / seconds, 1),
        "reconciles_per_s": round((b.reconciles - a.reconciles) / seconds, 1),
    }


COLUMNS = (
    ("minute", "min"), ("queued", "queued"), ("completions_per_min", "done/min"),
    ("bridge_cpu_cores", "cpu"), ("bridge_children_cpu_cores", "kids cpu"), ("bridge_rss_mib", "rss"),
    ("slurmctld_rss_mib", "ctld"), ("slurmrestd_rss_mib", "restd"), ("rest_per_s", "rest/s"),
    ("rest_connections", "conns"), ("kube_per_s_bridge", "kube/s"), ("apiserver_per_s_all", "api/s"),
    ("jobs_parsed_per_s", "parsed/s"), ("reconciles_per_s", "recon/s"),
)  # fmt: skip


def print_row(row: dict[str, Any], *, header: bool = False) -> None:
    if header:
        print("\n  " + " ".join(f"{label:>9}" for _, label in COLUMNS))
    print("  " + " ".join(f"{row[key]!s:>9}" for key, _ in COLUMNS), flush=True)


def log_figures(text: str) -> tuple[int, dict[str, int]]:
    """(lines, {warning or error message: count}) of the bridge's JSON log."""
    lines = text.splitlines()
    warnings: dict[str, int] = {}
    for line in lines:
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
                key = f"{entry['level']}: {entry.get('event', '?')}"
                warnings[key] = warnings.get(key, 0) + 1
    return len(lines), warnings


def foreground_waiting(jobsets: list[dict[str, Any]]) -> int:
    return sum("foregroundDeletion" in (js["metadata"].get("finalizers") or ()) for js in jobsets)


def test_soak_with_a_deep_queue_then_a_mass_cancel(
    kube_stack: KubeStack, soak_slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = QUEUED + RUNNING
    settings = E2ESettings(
        pool="soak", runner_nodes=2, runner_cpu=str(RUNNING + 4), runner_memory="64Gi", kwok_nodes=0,
        quota_cpu=str(RUNNING), quota_memory="64Gi", namespace="soak",
        slurm_priority="soak-slurm", urgent_priority="soak-urgent",
    )  # fmt: skip
    workdir = tmp_path_factory.mktemp(f"soak-{soak_slurm.version}")
    script = f"#!/bin/sh\nsleep {JOB_SECONDS}\n"
    result: dict[str, Any] = {
        "slurm": soak_slurm.package_version,
        "rest": soak_slurm.rest_version,
        "queued": QUEUED,
        "running": RUNNING,
        "soak_seconds": SOAK_SECONDS,
        "job_seconds": JOB_SECONDS,
        "load_before": load_average(),
    }
    with bench_stack(kube_stack, soak_slurm, workdir, settings, max_bridged_jobs=target + 200) as stack:
        bridge = counting_bridge(stack)
        result["bridge_args"] = BRIDGE_ARGS
        bridge.start()
        wait_bridge(bridge)
        assert bridge.process is not None
        pid = bridge.process.pid
        daemons = daemon_pids(soak_slurm)
        ids, submit_seconds = submit_many(soak_slurm, target, prefix="soak", script=script)
        result["submit_seconds"] = round(submit_seconds, 1)

        def top_up() -> None:
            """Submit as many jobs as ended since the last look, so the queue stays as deep."""
            pending, running = active_jobs(soak_slurm)
            if target - pending - running > 0:
                more, _ = submit_many(soak_slurm, target - pending - running, prefix="soak", script=script)
                ids.extend(more)

        began = time.monotonic()
        wait(lambda: jobset_count(stack) >= QUEUED, timeout=max(600.0, target * 1.0),
             what=f"{QUEUED} JobSets", interval=2.0)  # fmt: skip
        result["jobsets_made_seconds"] = round(time.monotonic() - began, 1)

        # The fill's tail: every job's hold conversion and first "why it waits" comment, written at a
        # bounded rate (five comments a second) after its JobSet. Steady state begins after it. Jobs
        # end meanwhile and the queue is kept as deep, a few at a time; those the top-up adds are
        # not waited for (there is always a newest one the bridge has not got to yet).
        filled = set(ids)

        def caught_up() -> bool:
            waiting = waiting_jobs(soak_slurm)
            top_up()
            return all(admin and comment for job_id, (admin, comment) in waiting.items() if job_id in filled)

        wait(caught_up, timeout=max(600.0, target * 1.0), what="every hold conversion and first comment",
             interval=2.0)  # fmt: skip
        result["caught_up_seconds"] = round(time.monotonic() - began, 1)

        def sample() -> Sample:
            assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
            return Sample.take(
                cluster=soak_slurm, bridge_pid=pid, metrics=bridge.metrics_text() or "",
                submitted=len(ids), daemons=daemons, client=stack.client,
            )  # fmt: skip

        rows: list[dict[str, Any]] = []
        profile_phase(bridge, result, "fill", jobs=target)  # with K8S_BRIDGE_BENCH_PROFILE: CPU by part
        start = last = sample()
        print(f"\nsoak: {QUEUED} queued / {RUNNING} running, Slurm {soak_slurm.package_version}, "
              f"sample every {SAMPLE_SECONDS:.0f} s")  # fmt: skip
        while last.at - start.at < SOAK_SECONDS - 1e-6:
            while (left := last.at + SAMPLE_SECONDS - time.monotonic()) > 0:
                time.sleep(min(TOP_UP_SECONDS, left))
                top_up()
            now = sample()
            row = interval(last, now, since=start.at)
            rows.append(row)
            print_row(row, header=len(rows) == 1)
            last = now
        result["samples"] = rows
        profile_phase(bridge, result, "steady", jobs=max(1, last.completed - start.completed))
        whole = interval(start, last, since=start.at)
        result["whole"] = whole
        seconds = last.at - start.at
        result["whole_rest_per_s_by_path"] = {
            k: round(v / seconds, 2) for k, v in delta(last.rest_by_path, start.rest_by_path).items()
        }
        result["whole_actions_per_s"] = {
            k: round(v / seconds, 2) for k, v in delta(last.actions, start.actions).items()
        }
        result["whole_events_per_s_by_source"] = {
            k: round(v / seconds, 2) for k, v in delta(last.events, start.events).items()
        }
        result["whole_kube_per_s_by_verb"] = {
            k: round(v / seconds, 2) for k, v in delta(last.kube_by_verb, start.kube_by_verb).items()
        }
        completed = last.completed - start.completed
        _, states = slurm_nodes_and_jobs(soak_slurm)
        ended = [states[j][0] for j in ids if j in states and states[j][0] not in ("PENDING", "RUNNING")]
        result["ended_states"] = {s: ended.count(s) for s in sorted(set(ended))}

        # The mass cancel: every job of the partition at once, queued and running.
        pending_now, running_now = active_jobs(soak_slurm)
        result["cancelled"] = {"queued": pending_now, "running": running_now}
        began = time.monotonic()
        cancel_all(soak_slurm)
        gone: dict[str, float] = {}
        most_foreground = 0
        jobsets: list[dict[str, Any]] = []
        timeline: list[dict[str, Any]] = []
        deadline = began + CLEANUP_TIMEOUT
        failed_looks = 0
        while len(gone) < 3 and time.monotonic() < deadline:
            try:
                jobsets, pods, nodes = stack.jobsets(), stack.pods(), stack.slurm_nodes()
            except (OSError, StackError):  # an API server too busy to list in time: look again
                failed_looks += 1
                continue
            most_foreground = max(most_foreground, foreground_waiting(jobsets))
            elapsed = round(time.monotonic() - began, 1)
            if not timeline or elapsed - timeline[-1]["s"] >= 5.0:
                timeline.append({
                    "s": elapsed,
                    "jobsets": len(jobsets),
                    "deleting": sum("deletionTimestamp" in js["metadata"] for js in jobsets),
                    "foreground": foreground_waiting(jobsets),
                    "pods": len(pods),
                    "slurm_nodes": len(nodes),
                    "finalizers_removed": int(bridge.metric(
                        "k8s_bridge_slurm_actions_total", action="remove_finalizer", result="ok")),
                })  # fmt: skip
                print(f"  cleanup {timeline[-1]}", flush=True)
            if "jobsets" not in gone and not jobsets:
                gone["jobsets"] = elapsed
            if "pods" not in gone and not pods:
                gone["pods"] = elapsed
            if "slurm_nodes" not in gone and not nodes:
                gone["slurm_nodes"] = elapsed
            time.sleep(2.0)  # each look lists every JobSet: not so often that the looks load the API server
        result["cleanup_seconds"] = gone
        result["cleanup_jobsets_left"] = len(jobsets)
        result["cleanup_timeline"] = timeline
        result["cleanup_failed_looks"] = failed_looks
        result["cleanup_most_jobsets_in_foreground_deletion"] = most_foreground
        result["load_after"] = load_average()
        assert bridge.alive(), bridge.log_tail()
        lines, warnings = log_figures(bridge.log_text())
        result["bridge_log_lines"] = lines
        result["bridge_log_warnings"] = warnings

    report(result)
    write_result(f"soak-{soak_slurm.version}", result)
    assert completed > 0, "no job completed during the soak"
    assert len(gone) == 3, f"not cleaned up {CLEANUP_TIMEOUT:.0f} s after the cancel: only {sorted(gone)}"


def report(r: dict[str, Any]) -> None:
    w = r["whole"]
    rows: list[tuple[str, Any]] = [
        ("Slurm / REST / bridge flags", f"{r['slurm']} / {r['rest']} / {r['bridge_args']}"),
        ("queued / running / job length", f"{r['queued']} / {r['running']} / {r['job_seconds']} s"),
        ("submitted in / JobSets made in / holds and first comments done in",
         f"{r['submit_seconds']} s / {r['jobsets_made_seconds']} s / {r['caught_up_seconds']} s"),
        (f"soak {r['soak_seconds']:.0f} s: completions/min", w["completions_per_min"]),
        ("bridge CPU (cores) / its scontrol children's / RSS MiB at end",
         f"{w['bridge_cpu_cores']} / {w['bridge_children_cpu_cores']} / {w['bridge_rss_mib']}"),
        ("slurmctld / slurmrestd RSS MiB: first -> last sample",
         f"{r['samples'][0]['slurmctld_rss_mib']} -> {w['slurmctld_rss_mib']} / "
         f"{r['samples'][0]['slurmrestd_rss_mib']} -> {w['slurmrestd_rss_mib']}"),
        ("bridge -> slurmrestd requests/s, connections", f"{w['rest_per_s']}, {w['rest_connections']}"),
        ("bridge -> API server requests/s; all clients",
         f"{w['kube_per_s_bridge']}; {w['apiserver_per_s_all']}"),
        ("  by path", r["whole_rest_per_s_by_path"]),
        ("  bridge -> API server by verb, per s", r["whole_kube_per_s_by_verb"]),
        ("Slurm jobs parsed/s by the bridge", w["jobs_parsed_per_s"]),
        ("reconciles/s; bridge actions/s by kind and result",
         f"{w['reconciles_per_s']}; {r['whole_actions_per_s']}"),
        ("  events and the requests they map to, per s, by source", r["whole_events_per_s_by_source"]),
        ("ended jobs seen (within MinJobAge)", r["ended_states"]),
        ("mass cancel (queued / running)", f"{r['cancelled']['queued']} / {r['cancelled']['running']}"),
        ("  -> no JobSet / no pod / no Slurm node (s; None: not by the timeout)",
         f"{r['cleanup_seconds'].get('jobsets')} / {r['cleanup_seconds'].get('pods')} / "
         f"{r['cleanup_seconds'].get('slurm_nodes')}"),
        ("  most JobSets waiting in foreground deletion", r["cleanup_most_jobsets_in_foreground_deletion"]),
        ("  JobSets left when the wait ended", r["cleanup_jobsets_left"]),
        ("bridge log lines / warnings", f"{r['bridge_log_lines']} / {r['bridge_log_warnings']}"),
        ("load before / after", f"{r['load_before']} / {r['load_after']}"),
    ]  # fmt: skip
    for phase, split in (r.get("profile") or {}).items():
        rows.append(
            (f"profile {phase}: CPU s by part (ms per job)", f"{split} ({split['profiled_ms_per_job']})")
        )
    print_table("Slurm bridge soak (deep queue, then a mass cancel)", rows)
