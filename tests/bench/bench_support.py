"""What the bridge benchmarks share: Kueue's own admission rate as the baseline, reading a bridge
process (CPU, memory, Prometheus text, the API server's request total), polling, rates, reporting.

Why a module of its own: the Slurm and the Ray bridge benchmarks put their figures beside the same
baseline, measured the same way in the same stack, and report them the same way; only what happens
in between differs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import math
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from bridge.admission import WorkloadState, describe_workload
from bridge.sandbox.e2e import KUEUE, BridgeProcess, local_queue_object
from bridge.sandbox.kube import ApiError, RestClient
from bridge.sandbox.processes import StackError
from bridge.sandbox.stack import KubeStack

RESULTS_DIR = os.environ.get("K8S_BRIDGE_BENCH_RESULTS", "")
"""Each test's figures are written there as JSON when set."""


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


# --- one process -----------------------------------------------------------------------------------

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (field 3 onwards, counted from 0 here)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def children_cpu_seconds(pid: int) -> float:
    """cutime + cstime of one process: what its children it has waited for used (the bridge's
    ``scontrol`` runs on Slurm 22.05, whose REST cannot update or delete nodes)."""
    fields = _stat_fields(pid)
    return (int(fields[13]) + int(fields[14])) / _CLOCK_TICKS


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of one process in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (``uptime``), recorded with every figure."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- Prometheus text -------------------------------------------------------------------------------

Sample = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Sample]:
    samples: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, label_text = head.partition("{")
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', label_text))
        with contextlib.suppress(ValueError):
            samples.append((name, labels, float(value)))
    return samples


def total(samples: Sequence[Sample], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items()))


def by_labels(samples: Sequence[Sample], name: str, keys: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for n, lab, v in samples:
        if n == name:
            key = " ".join(lab.get(k, "") for k in keys)
            out[key] = out.get(key, 0.0) + v
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    keys = sorted(set(after) | set(before))
    return {
        k: after.get(k, 0.0) - before.get(k, 0.0) for k in keys if after.get(k, 0.0) != before.get(k, 0.0)
    }


def apiserver_requests(client: RestClient) -> float:
    """Sum of ``apiserver_request_total`` over every client (watches counted when they start)."""
    try:
        text = client.get("/metrics")
    except (StackError, OSError):
        return math.nan
    return total(parse_metrics(str(text)), "apiserver_request_total")


# --- polling and figures ---------------------------------------------------------------------------


HTTP_COUNT = "k8s_bridge_bench_http_requests_total"
"""Every HTTP request a benchmarked bridge made (tests/bench/http_counting.py), by target, verb, resource."""


@dataclass(frozen=True)
class BridgeProbe:
    """One snapshot of a bridge: its metrics, CPU and memory, and the API server's request total.

    Subclasses name the bridge's action counter (:attr:`ACTIONS`) and add what only their bridge has.
    """

    ACTIONS: ClassVar[str]

    at: float
    samples: list[Sample]
    cpu: float
    rss: float
    hwm: float
    apiserver: float

    @classmethod
    def take(cls, client: RestClient, bridge: BridgeProcess) -> Self:
        assert bridge.process is not None
        at = time.monotonic()
        samples = parse_metrics(bridge.metrics_text() or "")
        rss, hwm = memory_mib(bridge.process.pid)
        return cls(at, samples, cpu_seconds(bridge.process.pid), rss, hwm, apiserver_requests(client))

    @classmethod
    def before_start(cls, client: RestClient) -> Self:
        """What a bridge that has not started yet has done: nothing (the API server's total as now)."""
        return cls(time.monotonic(), [], 0.0, 0.0, 0.0, apiserver_requests(client))

    def http(self) -> dict[str, float]:
        """Requests by ``"<target> <verb> <resource>"``."""
        return by_labels(self.samples, HTTP_COUNT, ("target", "verb", "resource"))

    def actions(self) -> dict[str, float]:
        return by_labels(self.samples, self.ACTIONS, ("action", "result"))


def wait(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """Sample count, nearest-rank p50 and p90, and the maximum.

    No p99: with the 50 to 200 samples a bench run gives, the nearest-rank p99 is the maximum or
    the one below it, so the maximum is reported as such.
    """
    if not values:
        return {"n": 0, "p50": None, "p90": None, "max": None}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "max": round(max(values), 3),
    }


def rate_figures(
    series: list[tuple[float, float]], *, start: float, base: float, count: int
) -> dict[str, Any]:
    """From a (time, cumulative count) series: time to all, to the first, and the rate of the middle 80%.

    Both sides of a ratio use this one rule: ``per_s_overall`` is the count over the time from
    ``start`` to the last, ``per_s_middle_80pct`` the 10th to the 90th percent of the count over the
    time between them (start-up and tail dropped on both sides alike).
    """
    points = [(t - start, c - base) for t, c in series]
    first = next((t for t, c in points if c > 0), math.nan)
    done = next(t for t, c in points if c >= count)
    lo = next(t for t, c in points if c >= 0.1 * count)
    hi = next(t for t, c in points if c >= 0.9 * count)
    middle = 0.8 * count / (hi - lo) if hi > lo else math.nan
    return {
        "seconds_to_all": round(done, 2),
        "seconds_to_first": round(first, 2),
        "per_s_overall": round(count / done, 1),
        "per_s_middle_80pct": round(middle, 1),
    }


def print_table(title: str, rows: Sequence[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(f"\n{title}")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")


def write_result(name: str, result: dict[str, Any]) -> None:
    if not RESULTS_DIR:
        return
    folder = Path(RESULTS_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {path}")


def parse_time(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def condition_time(obj: dict[str, Any], kind: str) -> float | None:
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return parse_time(str(condition.get("lastTransitionTime", "")))
    return None


# --- Kubernetes --------------------------------------------------------------------------------------


def list_items(client: RestClient, path: str, **query: str) -> list[dict[str, Any]]:
    """The items of a list (none when the collection does not exist)."""
    try:
        items: list[dict[str, Any]] = client.get(path, **query).get("items") or []
    except ApiError as error:
        if error.status == 404:
            return []
        raise
    return items


class AdmissionWatch:
    """A watch on Workloads in a thread of its own: the local arrival time of each Workload's first
    Admitted (or Finished) event.

    Why a watch and not polling the list: a poll sees an admission up to one interval late and costs
    a whole list each time, so the rate it gives is bounded by the poll; the watch event arrives when
    the API server commits Kueue's status write, and its arrival is timed here with the monotonic
    clock the bridge's figures use.
    """

    def __init__(self, client: RestClient, path: str, *, resource_version: str) -> None:
        query = urllib.parse.urlencode(
            {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "false",
             "timeoutSeconds": "900"}
        )  # fmt: skip
        server = urllib.parse.urlsplit(client.server)
        self._host, self._port = server.hostname or "127.0.0.1", server.port or 443
        self._target = f"{path}?{query}"
        self._context = client.ssl_context
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._connection: http.client.HTTPSConnection | None = None
        self._response: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="admission-watch", daemon=True)

    def __enter__(self) -> Self:
        self._connection = http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=900
        )
        self._connection.request("GET", self._target, headers={"Accept": "application/json"})
        self._response = self._connection.getresponse()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Shut the socket down first: closing the response while the reader thread waits in a read
        # blocks until the next event, or until the server ends the watch (timeoutSeconds, 15 min).
        sock = self._connection.sock if self._connection is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._response.close()
        if self._connection is not None:
            self._connection.close()

    def _run(self) -> None:
        try:
            for line in self._response:
                arrived = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") not in ("ADDED", "MODIFIED") or not admitted_count([obj]):
                    continue
                with self._lock:
                    self._seen.setdefault(obj["metadata"]["uid"], arrived)
        except (OSError, ValueError, http.client.HTTPException) as error:
            self._error = error

    def count(self) -> int:
        if self._error is not None and not self._thread.is_alive():
            raise AssertionError(f"the Workload watch ended: {self._error!r}")
        with self._lock:
            return len(self._seen)

    def arrivals(self) -> list[float]:
        """Arrival times, sorted."""
        with self._lock:
            return sorted(self._seen.values())


def admitted_count(workloads: Sequence[dict[str, Any]]) -> int:
    """Workloads Kueue has admitted (or that finished after it did)."""
    return sum(
        describe_workload(w).state in (WorkloadState.ADMITTED, WorkloadState.FINISHED) for w in workloads
    )


def held_cluster_queue(
    name: str, *, flavor: str, cpu: str, memory: str, stop_policy: str = "Hold"
) -> dict[str, Any]:
    """A ClusterQueue of one flavor, every namespace, ``stopPolicy`` ``Hold`` (or ``None``: resumed)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "stopPolicy": stop_policy,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": memory},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def baseline_job(name: str, *, namespace: str, local_queue: str) -> dict[str, Any]:
    """A suspended 10m-CPU batch/v1 Job in ``local_queue`` (Kueue's webhook is not there to suspend it)."""
    resources = {"cpu": "10m", "memory": "1Mi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": local_queue},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "work",
                            "image": "k8s-bridge.local/none",
                            "command": ["true"],
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                }
            },
        },
    }


def kueue_admission_baseline(
    kube: KubeStack, count: int, *, node_labels: Mapping[str, str]
) -> dict[str, Any]:
    """Kueue's admission rate for ``count`` plain Jobs released at once from a held ClusterQueue.

    The Jobs are queued to a ClusterQueue with ``stopPolicy: Hold`` and quota for all; once every
    Workload exists the queue is resumed, and each Admitted transition is timed where it arrives on a
    watch (:class:`AdmissionWatch`); the rates follow :func:`rate_figures`, the rule the bridge's own
    rates use. The flavor's ``node_labels`` select the nodes their pods land on
    (kwok nodes). The Jobs are deleted afterwards and the queue held again.
    """
    ns, flavor, cq, lq = "bench-kueue", "bench-kueue-kwok", "bench-kueue", "baseline"
    client = kube.client
    kube.control_plane.ensure_namespace(ns)
    client.apply(
        f"{KUEUE}/resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": dict(node_labels)},
        },
    )

    def queue(stop_policy: str) -> dict[str, Any]:
        return held_cluster_queue(
            cq, flavor=flavor, cpu=str(count), memory=f"{count}Gi", stop_policy=stop_policy
        )

    client.apply(f"{KUEUE}/clusterqueues", queue("Hold"))
    client.apply(*local_queue_object(lq, namespace=ns, cluster_queue=cq))
    workloads_path = f"{KUEUE}/namespaces/{ns}/workloads"
    jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
    try:
        for index in range(count):
            client.create(jobs_path, baseline_job(f"baseline-{index}", namespace=ns, local_queue=lq))
        wait(
            lambda: len(list_items(client, workloads_path)) >= count,
            timeout=300, what=f"{count} Workloads of the baseline Jobs",
        )  # fmt: skip

        listed = client.get(workloads_path)
        assert admitted_count(listed.get("items") or []) == 0
        with AdmissionWatch(
            client, workloads_path, resource_version=listed["metadata"]["resourceVersion"]
        ) as watch:
            start = time.monotonic()
            client.apply(f"{KUEUE}/clusterqueues", queue("None"))
            wait(
                lambda: watch.count() >= count, timeout=600, what="Kueue to admit the baseline", interval=0.05
            )
        arrivals = watch.arrivals()
        figures = rate_figures([(t, i + 1) for i, t in enumerate(arrivals)], start=start, base=0, count=count)
        return {
            "jobs": count,
            "method": "watch on Workloads, local arrival time of each Admitted transition",
            "seconds": figures["seconds_to_all"],
            "seconds_to_first": figures["seconds_to_first"],
            "admissions_per_s": figures["per_s_overall"],
            "admissions_per_s_middle_80pct": figures["per_s_middle_80pct"],
        }
    finally:
        for job in list_items(client, jobs_path):
            with contextlib.suppress(StackError):
                client.delete(f"{jobs_path}/{job['metadata']['name']}")
        with contextlib.suppress(AssertionError):
            wait(lambda: not list_items(client, workloads_path), timeout=120, what="baseline Workloads to go")
        with contextlib.suppress(StackError):
            client.apply(f"{KUEUE}/clusterqueues", queue("Hold"))
