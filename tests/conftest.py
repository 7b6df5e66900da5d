"""Fixtures shared by all tiers: each part of the local stack has its own fixture module."""

pytest_plugins = [
    "tests.fixtures.kube",
    "tests.fixtures.slurm",
    "tests.fixtures.ray",
    "tests.fixtures.logging_state",
]
