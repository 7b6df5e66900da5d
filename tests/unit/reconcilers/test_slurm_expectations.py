"""The memories of writes: nodes (shown ones until a list begun after says, recorded ones for good)
and removed finalizers."""

from __future__ import annotations

from reconcilers.slurm_expectations import NodeWrites, Remembered


class Lists:
    def __init__(self) -> None:
        self.lists = 0
        self.listed = 0

    def whole_list(self) -> None:
        self.lists += 1
        self.listed = self.lists


def test_a_shown_node_is_done_until_a_list_begun_after_the_deletion_still_shows_it() -> None:
    lists = Lists()
    lists.whole_list()
    deletions = NodeWrites(lists)
    deletions.made("b42-0")
    assert deletions.done_already(shown={"b42-0", "b42-1"}, recorded=()) == {"b42-0"}
    lists.lists += 1  # begun, not answered yet
    assert deletions.done_already(shown={"b42-0"}, recorded=()) == {"b42-0"}
    lists.listed = lists.lists  # answered, and it still shows the node: delete it again
    assert deletions.done_already(shown={"b42-0"}, recorded=()) == frozenset()


def test_a_recorded_name_not_shown_is_deleted_once_whatever_the_lists_and_again_once_it_shows() -> None:
    lists = Lists()
    deletions = NodeWrites(lists)
    deletions.made("b42-1")  # recorded on the JobSet, never registered
    for _ in range(3):
        lists.whole_list()
        assert deletions.done_already(shown=set(), recorded=["b42-1"]) == {"b42-1"}
    # Its slurmd registered after all: a list begun after the deletion shows it.
    assert deletions.done_already(shown={"b42-1"}, recorded=["b42-1"]) == frozenset()


def test_the_oldest_deletions_are_forgotten_beyond_the_bound() -> None:
    deletions = NodeWrites(Lists(), remembered=3)
    for i in range(5):
        deletions.made(f"b{i}-0")
    assert len(deletions) == 3
    assert deletions.done_already(shown=set(), recorded=["b0-0", "b4-0"]) == {"b4-0"}


def test_a_write_is_remembered_until_discarded_within_the_bound() -> None:
    removed = Remembered(remembered=2)
    removed.add("uid-1")
    assert "uid-1" in removed
    removed.discard("uid-1")
    assert "uid-1" not in removed
    for uid in ("uid-2", "uid-3", "uid-4"):
        removed.add(uid)
    assert len(removed) == 2
    assert "uid-2" not in removed
    assert "uid-4" in removed
