"""Every real REST response of the reference parses into the views, with the documented facts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bridge.api.slurm_job import Gres, JobState, SlurmJob
from bridge.api.slurm_node import NodeState
from bridge.slurmrest.versions import adapter_for

DATA = Path(__file__).parent / "data"
Load = Callable[[str], Any]


def version_of(name: str) -> str:
    if "v0.0.38" in name:
        return "v0.0.38"
    return "v0.0." + name.rsplit("-v0.0.", 1)[1].removesuffix(".json")


def one_job(load: Load, name: str) -> SlurmJob:
    page = adapter_for(version_of(name)).parse_jobs(load(name))
    assert len(page.jobs) == 1
    return page.jobs[0]


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("rest-*.json")))
def test_every_reference_response_parses(reference: Load, name: str) -> None:
    adapter = adapter_for(version_of(name))
    body = reference(name)
    assert adapter.parse_problems(body) == ((), ())
    if "jobs" in body:
        jobs = adapter.parse_jobs(body).jobs
        assert jobs
        assert all(j.rest_version == adapter.version for j in jobs)
    elif "reservations" in body:
        assert adapter.parse_reservations(body)
    else:
        assert adapter.parse_nodes(body).nodes


@pytest.mark.parametrize("name", ["rest-v0.0.38-reservations.json", "rest-24.11-reservations-v0.0.42.json"])
def test_reservations_read_alike_from_both_generations(reference: Load, name: str) -> None:
    """Three real reservations: licenses only (ANY_NODES, in 2027), one node, the same node FLEX."""
    by_name = {r.name: r for r in adapter_for(version_of(name)).parse_reservations(reference(name))}
    assert sorted(by_name) == ["flex", "lic", "maint"]
    lic, maint, flex = by_name["lic"], by_name["maint"], by_name["flex"]
    assert lic.start_time == datetime(2027, 1, 1, tzinfo=UTC)
    assert lic.flags == {"ANY_NODES"}
    assert (lic.node_count, lic.licenses) == (0, "demo:1")
    assert not lic.holds_nodes
    assert maint.node_count == 1
    assert maint.holds_nodes
    assert maint.end_time is not None
    assert maint.start_time is not None
    assert (maint.end_time - maint.start_time).total_seconds() == 3600
    assert "FLEX" in flex.flags
    assert not flex.holds_nodes


def test_v0038_held_job_17_rich_request(reference: Load) -> None:
    # sbatch --hold -N1 -n2 -c1 --mem-per-cpu=200 --gres=gpu:1 -t 1:30:00
    job = one_job(reference, "rest-v0.0.38-job17.json")
    assert job.job_id == 17
    assert job.state is JobState.PENDING
    assert job.state_reason == "JobHeldUser"
    assert job.hold
    assert job.held_by == "user"
    assert job.partition == "bridge"
    assert job.account == "research"
    assert job.user_name == "alice"
    assert job.qos == ""  # no slurmdbd
    assert job.comment == "pod-image=ubuntu:22.04"
    assert (job.node_count, job.max_nodes, job.tasks, job.cpus) == (1, 1, 2, 2)
    assert job.cpus_per_task is None  # always null in v0.0.38
    assert job.cpus_per_node == 2
    assert job.memory_per_cpu_mb == 200
    assert job.memory_per_node_mb is None
    assert job.gres_per_node == (Gres(name="gpu", count=1),)
    assert job.gpus_per_node == 1
    assert job.time_limit_minutes == 90
    assert job.time_limit_seconds == 5400
    assert job.nodes == ()
    assert job.required_nodes == ()
    assert job.submit_time == datetime.fromtimestamp(1796033806, tz=UTC)
    assert job.start_time is None
    assert job.end_time is None
    assert not job.is_het
    assert not job.is_array
    assert not job.exclusive
    assert job.waits_for_bridge({"bridge"})
    assert not job.waits_for_bridge({"debug"})


def test_v0038_job_18_gpus_per_node_and_mem(reference: Load) -> None:
    # -N2 --ntasks-per-node=1 --gpus-per-node=1 --mem=300
    job = one_job(reference, "rest-v0.0.38-job18.json")
    assert (job.node_count, job.max_nodes, job.tasks_per_node) == (2, 2, 1)
    assert job.gpus_per_node == 1
    assert job.memory_per_node_mb == 300
    assert job.memory_per_cpu_mb is None
    assert job.cpus_per_node == 1
    assert job.time_limit_seconds == 600


def test_v0038_job_19_gpus_per_job(reference: Load) -> None:
    # -N1 -n1 --gpus=1 --cpus-per-gpu=2 --mem-per-gpu=100
    job = one_job(reference, "rest-v0.0.38-job19.json")
    assert job.gpus_per_job == 1
    assert job.gpus_per_node is None
    assert job.cpus_per_gpu == 2
    assert job.memory_per_gpu_mb == 100
    assert job.memory_per_node_mb is None
    assert job.memory_per_cpu_mb is None
    assert not job.whole_node_memory


def test_v0038_job_20_exclusive_whole_node(reference: Load) -> None:
    # -N2 --ntasks-per-node=2 -c2 --mem=0 --exclusive
    job = one_job(reference, "rest-v0.0.38-job20.json")
    assert (job.node_count, job.tasks_per_node, job.tasks, job.cpus) == (2, 2, 4, 8)
    assert job.cpus_per_node == 4
    assert job.whole_node_memory
    assert job.exclusive
    assert not job.exclusive_user


def test_v0038_pending_held_job(reference: Load) -> None:
    job = one_job(reference, "rest-v0.0.38-pending-held-job.json")
    assert job.job_id == 6
    assert job.partition == "debug"
    assert job.comment == "bridge-test"
    assert job.hold
    assert job.memory_per_node_mb == 200


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_2411_held_job_in_each_version(reference: Load, version: str) -> None:
    name = f"rest-24.11-jobs-held-{version}.json"
    page = adapter_for(version).parse_jobs(reference(name))
    assert page.update_time == 1796035547  # last_update: what to poll with next
    assert page.last_backfill is None
    (job,) = page.jobs
    assert job.job_id == 1
    assert job.partition == "bridge"
    assert job.user_name == "root"
    assert job.state is JobState.PENDING
    assert job.state_flags == frozenset()
    assert job.hold
    assert job.held_by == "user"
    assert job.state_reason == "JobHeldUser"
    assert job.cpus_per_task == 1
    assert job.cpus_per_node == 1
    assert job.time_limit_minutes is None  # infinite
    assert job.whole_node_memory  # memory_per_node {set, 0}
    assert job.array_task_id is None
    assert job.het_job_id is None
    assert not job.is_array
    assert job.switches is None
    assert job.submit_time == datetime.fromtimestamp(1796035544, tz=UTC)


def test_2411_completed_job_was_pinned(reference: Load) -> None:
    job = one_job(reference, "rest-24.11-job1-completed-v0.0.42.json")
    assert job.state is JobState.COMPLETED
    assert job.is_finished
    assert not job.hold
    assert job.held_by is None
    assert job.nodes == ("dyn1",)
    assert job.required_nodes == ("dyn1",)
    assert job.is_pinned_to(["dyn1"], "bridge-job-1")
    assert not job.is_pinned_to(["dyn1", "dyn2"], "bridge-job-1")
    assert job.start_time == job.end_time == datetime.fromtimestamp(1796035582, tz=UTC)


def test_2411_requeue_held_job(reference: Load) -> None:
    job = one_job(reference, "rest-24.11-job2-requeuehold-v0.0.42.json")
    assert job.state is JobState.PENDING
    assert job.hold
    assert job.restart_count == 1
    assert job.state_description == "job requeued in held state"
    assert job.required_nodes == ("dyn1",)  # kept: the release must re-pin anyway


def test_v0038_dynamic_node(reference: Load) -> None:
    (node,) = adapter_for("v0.0.38").parse_nodes(reference("rest-v0.0.38-node-dyn1.json")).nodes
    assert node.name == "dyn1"
    assert node.state is NodeState.ALLOCATED
    assert node.state_flags == {"DYNAMIC_NORM"}
    assert node.is_dynamic
    assert node.features == ("bridge-job-7",)
    assert node.has_feature("bridge-job-7")
    assert (node.cpus, node.real_memory_mb) == (2, 1000)
    assert not node.is_idle_and_usable


def test_v0042_dynamic_node(reference: Load) -> None:
    page = adapter_for("v0.0.42").parse_nodes(reference("rest-24.11-nodes-dyn1-v0.0.42.json"))
    assert page.update_time == 1796035574
    (node,) = page.nodes
    assert node.state is NodeState.IDLE
    assert node.state_flags == {"DYNAMIC_NORM"}
    assert node.is_idle_and_usable
    assert node.is_dynamic
    assert not node.is_drained_or_draining
    assert node.features == ("k8sbridge", "bridge-job-1")
    assert node.has_feature("bridge-job-1")
    assert node.partitions == ("bridge",)
    assert node.real_memory_mb == 500
    assert node.cpus == 1


def test_v0038_state_flag_hides_base_state(reference: Load) -> None:
    raw = reference("rest-v0.0.38-job17.json")["jobs"][0] | {
        "job_state": "COMPLETING",
        "state_reason": "None",
        "priority": 4294901759,  # job17 is a held job (priority 0), which would read as a requeue
    }
    job = adapter_for("v0.0.38").parse_job(raw)
    assert job.state is JobState.COMPLETED
    assert job.is_completing
    assert job.is_finished
    assert not job.hold


def test_v0038_requeuehold_under_way_is_pending_and_held_not_ended(reference: Load) -> None:
    """22.05 prints only COMPLETING while ``scontrol requeuehold`` runs (real response): the job is
    going back to the queue, so it must not read as finished (the bridge would clean it up)."""
    job = one_job(reference, "rest-v0.0.38-requeuehold-completing.json")
    assert job.state is JobState.PENDING
    assert job.is_completing
    assert not job.is_finished
    assert job.hold
    assert job.restart_count == 1
    after = one_job(reference, "rest-v0.0.38-requeuehold-pending.json")
    assert (after.state, after.is_completing, after.hold) == (JobState.PENDING, False, True)


def test_v0038_cancelled_while_running_ends_after_completing(reference: Load) -> None:
    """scancel of a running job on 22.05 (real responses): COMPLETING (outcome not shown yet, read as
    an end), then CANCELLED."""
    ending = one_job(reference, "rest-v0.0.38-scancel-completing.json")
    assert ending.is_finished
    assert ending.is_completing
    assert not ending.hold
    done = one_job(reference, "rest-v0.0.38-scancel-cancelled.json")
    assert done.state is JobState.CANCELLED
    assert not done.is_completing


@pytest.mark.parametrize(
    "signs",
    [{"state_reason": "JobHeldAdmin"}, {"priority": 0}, {"state_description": "job requeued"}],
)
def test_v0038_completing_with_any_sign_of_a_requeue_is_pending(
    reference: Load, signs: dict[str, Any]
) -> None:
    raw = reference("rest-v0.0.38-scancel-completing.json")["jobs"][0] | signs
    job = adapter_for("v0.0.38").parse_job(raw)
    assert job.state is JobState.PENDING
    assert not job.is_finished


def test_v0042_state_flags_and_drained_node(reference: Load) -> None:
    raw = reference("rest-24.11-job1-completed-v0.0.42.json")["jobs"][0] | {
        "job_state": ["CANCELLED", "COMPLETING"]
    }
    job = adapter_for("v0.0.42").parse_job(raw)
    assert job.state is JobState.CANCELLED
    assert job.is_completing
    node_raw = reference("rest-24.11-nodes-dyn1-v0.0.42.json")["nodes"][0] | {
        "state": ["IDLE", "DRAIN", "DYNAMIC_NORM"]
    }
    node = adapter_for("v0.0.42").parse_node(node_raw)
    assert node.is_drained_or_draining
    assert not node.is_idle_and_usable


def test_v0041_exclusive_and_v0042_shared(reference: Load) -> None:
    raw41 = reference("rest-24.11-jobs-held-v0.0.41.json")["jobs"][0] | {"exclusive": ["true"]}
    assert adapter_for("v0.0.41").parse_job(raw41).exclusive
    raw42 = reference("rest-24.11-jobs-held-v0.0.42.json")["jobs"][0] | {"shared": ["user"]}
    job = adapter_for("v0.0.42").parse_job(raw42)
    assert job.exclusive_user
    assert not job.exclusive


def test_array_and_het_fields(reference: Load) -> None:
    raw = reference("rest-24.11-jobs-held-v0.0.42.json")["jobs"][0] | {
        "array_job_id": {"set": True, "infinite": False, "number": 7},
        "array_task_id": {"set": True, "infinite": False, "number": 3},
        "het_job_id": {"set": True, "infinite": False, "number": 9},
        "het_job_offset": {"set": True, "infinite": False, "number": 1},
    }
    job = adapter_for("v0.0.42").parse_job(raw)
    assert job.is_array
    assert job.array_job_id == 7
    assert job.array_task_id == 3
    assert job.is_het
    assert job.het_job_id == 9
    assert job.het_job_offset == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:1", (Gres(name="gpu", count=1),)),
        ("gres/gpu:a100=2", (Gres(name="gpu", type="a100", count=2),)),
        ("gres/gpu:a100:4,gres/nic:1", (Gres(name="gpu", type="a100", count=4), Gres(name="nic", count=1))),
        ("cpu=2,mem=400M,gres/gpu=3", (Gres(name="gpu", count=3),)),
        ("gres/gpu", (Gres(name="gpu", count=1),)),
        ("", ()),
    ],
)
def test_gres_parsing(text: str, expected: tuple[Gres, ...]) -> None:
    assert Gres.parse_list(text) == expected


def test_gres_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="GRES"):
        Gres.parse_list("gres/gpu:a:b:c=x")
