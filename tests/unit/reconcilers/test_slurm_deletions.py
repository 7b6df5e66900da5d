"""The memory of deleted nodes: until a whole node list begun after the deletion is stored."""

from __future__ import annotations

from reconcilers.slurm_deletions import NodeDeletions


class Lists:
    def __init__(self) -> None:
        self.lists = 0
        self.listed = 0

    def whole_list(self) -> None:
        self.lists += 1
        self.listed = self.lists


def test_a_deletion_is_remembered_until_a_list_begun_after_it_is_stored() -> None:
    lists = Lists()
    lists.whole_list()
    deletions = NodeDeletions(lists)
    deletions.deleted("b42-0")
    assert deletions.unlisted(["b42-0", "b42-1"]) == {"b42-0"}
    lists.lists += 1  # begun, not answered yet
    assert deletions.unlisted(["b42-0"]) == {"b42-0"}
    lists.listed = lists.lists
    assert deletions.unlisted(["b42-0"]) == frozenset()


def test_forgotten_deletions_are_dropped_at_the_next_deletion() -> None:
    lists = Lists()
    deletions = NodeDeletions(lists)
    for i in range(100):
        deletions.deleted(f"b{i}-0")
    lists.whole_list()
    deletions.deleted("b500-0")
    assert len(deletions) == 1
