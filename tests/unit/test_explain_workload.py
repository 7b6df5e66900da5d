"""explain's account of Kueue's decision: state, reason while waiting, and the TAS assignment."""

from __future__ import annotations

from typing import Any

from bridge.admission import describe_workload
from bridge.program import workload_lines

HOST = "kubernetes.io/hostname"


def workload(*, conditions: list[dict[str, str]], admission: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions}
    if admission is not None:
        status["admission"] = admission
    return {"metadata": {"name": "jobset-slurm-kb2205-7-1a2b3", "namespace": "slurm"}, "status": status}


def test_an_admitted_workload_shows_its_topology_domains() -> None:
    admission = {
        "clusterQueue": "e2e-tas",
        "podSetAssignments": [
            {
                "name": "slurmd",
                "count": 2,
                "flavors": {"cpu": "e2e-tas-runner", "memory": "e2e-tas-runner"},
                "topologyAssignment": {
                    "levels": [HOST],
                    "slices": [
                        {
                            "domainCount": 2,
                            "valuesPerLevel": [
                                {"individual": {"prefix": "e2e-tas-runner-", "roots": ["2", "3"]}}
                            ],
                            "podCounts": {"universal": 1},
                        }
                    ],
                },
            }
        ],
    }
    view = describe_workload(
        workload(
            conditions=[{"type": "Admitted", "status": "True", "reason": "Admitted"}], admission=admission
        )
    )
    assert workload_lines(view) == [
        "Kueue: Workload slurm/jobset-slurm-kb2205-7-1a2b3 Admitted in ClusterQueue e2e-tas",
        "  podset slurmd: 2 pod(s), flavors cpu=e2e-tas-runner, memory=e2e-tas-runner",
        f"    topology domain {HOST}=e2e-tas-runner-2: 1 pod(s)",
        f"    topology domain {HOST}=e2e-tas-runner-3: 1 pod(s)",
    ]


def test_a_waiting_workload_shows_why() -> None:
    message = (
        "couldn't assign flavors to pod set slurmd: topology \"e2e-tas\" doesn't allow to fit any of 3 pod(s)"
    )
    view = describe_workload(
        workload(
            conditions=[{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}]
        )
    )
    assert workload_lines(view) == [
        f"Kueue: Workload slurm/jobset-slurm-kb2205-7-1a2b3 Pending: Pending: {message}"
    ]


def test_a_new_workload_without_conditions_is_one_line() -> None:
    assert workload_lines(describe_workload(workload(conditions=[]))) == [
        "Kueue: Workload slurm/jobset-slurm-kb2205-7-1a2b3 Pending"
    ]
