"""Hostlist expressions: examples from Slurm's own output, and round-trip properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.slurmrest import hostlist
from bridge.slurmrest.hostlist import HostlistError


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("", []),
        ("(null)", []),
        ("dyn1", ["dyn1"]),
        ("b42-[0-1]", ["b42-0", "b42-1"]),
        ("b42-[0-1,5]", ["b42-0", "b42-1", "b42-5"]),
        ("n[001-003]", ["n001", "n002", "n003"]),
        ("n[09-11]", ["n09", "n10", "n11"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("gpu-a[1,3]-x", ["gpu-a1-x", "gpu-a3-x"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert hostlist.expand(expr) == names


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["b42-0", "b42-1", "b42-5"], "b42-[0-1,5]"),
        (["n003", "n001", "n002"], "n[001-003]"),
        (["dyn1"], "dyn1"),
        (["n9", "n10"], "n[9-10]"),
        (["x", "n1", "n1"], "n1,x"),
        (["n01", "n1"], "n1,n01"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expr: str) -> None:
    assert hostlist.compress(names) == expr


@pytest.mark.parametrize("bad", ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]", "n[1-2-3]"])
def test_malformed_expressions_raise(bad: str) -> None:
    with pytest.raises(HostlistError):
        hostlist.expand(bad)


def test_expansion_is_bounded() -> None:
    with pytest.raises(HostlistError, match="more than"):
        hostlist.expand("n[0-999999999]")
    with pytest.raises(HostlistError, match="more than"):
        hostlist.expand("a[0-999]b[0-999]", limit=10_000)


@pytest.mark.parametrize("bad", ["a,b", "n[1]", "", " n1"])
def test_unrepresentable_names_raise(bad: str) -> None:
    with pytest.raises(HostlistError):
        hostlist.compress([bad])


_prefix = st.sampled_from(["n", "b42-", "dyn", "gpu-a", "rack1-node", "x.y_z-"])
_name = st.one_of(
    st.builds(lambda p, n: f"{p}{n}", _prefix, st.integers(0, 250)),
    st.builds(lambda p, n, w: f"{p}{n:0{w}d}", _prefix, st.integers(0, 250), st.integers(1, 4)),
    st.from_regex(r"[a-z][a-z.-]{0,6}[a-z]", fullmatch=True),
)


@given(st.lists(_name, max_size=40))
def test_compress_then_expand_gives_the_same_set(names: list[str]) -> None:
    expanded = hostlist.expand(hostlist.compress(names))
    assert sorted(expanded) == sorted(set(names))


@given(st.lists(_name, max_size=40))
def test_compress_is_canonical(names: list[str]) -> None:
    once = hostlist.compress(names)
    assert hostlist.compress(hostlist.expand(once)) == once
    assert hostlist.compress(reversed(names)) == once


@given(_prefix, st.integers(0, 500), st.integers(0, 60), st.integers(1, 4))
def test_expand_then_compress_of_a_range(prefix: str, lo: int, span: int, width: int) -> None:
    expr = f"{prefix}[{lo:0{width}d}-{lo + span:0{width}d}]"
    names = hostlist.expand(expr)
    assert len(names) == span + 1
    assert hostlist.expand(hostlist.compress(names)) == names
