"""Request bodies per REST version: the shapes verified on real 22.05 and 24.11."""

from __future__ import annotations

import pytest

from bridge.slurmrest.versions import SUPPORTED_VERSIONS, adapter_for

DATA_PARSER = [v for v in SUPPORTED_VERSIONS if v != "v0.0.38"]


def test_v0038_pins_with_nodelist() -> None:
    body = adapter_for("v0.0.38").job_update_body(
        required_nodes=["b42-0", "b42-1"], constraints="bridge-job-42", hold=False
    )
    assert body == {"nodelist": "b42-0,b42-1", "constraints": "bridge-job-42", "hold": False}


def test_v0038_begin_time_is_a_uts_time_string() -> None:
    # 22.05.8 refuses a number ("Unable to parse time", the whole update fails) although the
    # OpenAPI document says integer; "uts<epoch>" is applied (verified on the local stack).
    assert adapter_for("v0.0.38").job_update_body(hold=False, begin_time=1796042590) == {
        "hold": False,
        "begin_time": "uts1796042590",
    }


def test_v0038_has_no_node_updates() -> None:
    adapter = adapter_for("0.0.38")
    assert not adapter.can_update_nodes
    assert not adapter.can_delete_nodes
    assert not adapter.can_requeue_hold
    with pytest.raises(NotImplementedError):
        adapter.node_update_body(state="DRAIN", reason="x")


@pytest.mark.parametrize("version", DATA_PARSER)
def test_data_parser_pins_at_top_level(version: str) -> None:
    adapter = adapter_for(version)
    body = adapter.job_update_body(
        required_nodes=["dyn1"], constraints="bridge-job-1", hold=False, begin_time=5
    )
    assert "job" not in body  # a {"job": ...} wrapper is ignored by slurmrestd with a warning
    assert body == {
        "required_nodes": ["dyn1"],
        "constraints": "bridge-job-1",
        "hold": False,
        "begin_time": {"set": True, "infinite": False, "number": 5},
    }
    assert adapter.node_update_body(state="DRAIN", reason="done") == {"state": ["DRAIN"], "reason": "done"}
    assert adapter.can_update_nodes
    assert adapter.can_delete_nodes
    assert adapter.can_requeue_hold == (version == "v0.0.45")


def test_v0038_clears_the_pin_with_an_empty_nodelist() -> None:
    # verified on 22.05.8: ReqNodeList becomes (null), the hold in the same update lands
    assert adapter_for("v0.0.38").job_update_body(required_nodes=(), hold=True) == {
        "nodelist": "",
        "hold": True,
    }


@pytest.mark.parametrize("version", DATA_PARSER)
def test_data_parser_clears_the_pin_with_one_empty_name(version: str) -> None:
    # 24.11.5: [] is read as "not given" (the pin stays, no warning); "" clears with a type warning;
    # [""] clears, no warning. The documents of v0.0.43+ keep required_nodes a csv_string list.
    body = adapter_for(version).job_update_body(required_nodes=(), hold=True)
    assert body == {"required_nodes": [""], "hold": True}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_only_given_fields_are_sent(version: str) -> None:
    adapter = adapter_for(version)
    assert adapter.job_update_body(comment="why") == {"comment": "why"}
    assert adapter.job_update_body(hold=True) == {"hold": True}
    assert adapter.job_update_body() == {}


def test_unknown_version_is_refused() -> None:
    with pytest.raises(KeyError):
        adapter_for("v0.0.39")
