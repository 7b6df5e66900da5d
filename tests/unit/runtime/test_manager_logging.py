"""Structured logging: JSON off a terminal, context variables in every line, verbosity levels."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from bridge.runtime.logging import configure_logging, level_for_verbosity

pytestmark = pytest.mark.usefixtures("restore_logging")


def test_json_lines_carry_bound_context_and_stdlib_records() -> None:
    out = io.StringIO()  # not a terminal
    configure_logging(stream=out)
    with structlog.contextvars.bound_contextvars(reconcile_id="r-1", controller="slurm"):
        structlog.get_logger("bridge.test").info("reconciled", key="ns/a")
    logging.getLogger("aiohttp.client").warning("from the standard library")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "reconciled"
    assert first["reconcile_id"] == "r-1"
    assert first["controller"] == "slurm"
    assert first["key"] == "ns/a"
    assert first["level"] == "info"
    assert "timestamp" in first
    assert second["event"] == "from the standard library"
    assert second["level"] == "warning"


def test_exceptions_become_structured_tracebacks() -> None:
    out = io.StringIO()
    configure_logging(stream=out, json=True)
    try:
        raise ValueError("bad")
    except ValueError:
        structlog.get_logger().exception("failed")
    record = json.loads(out.getvalue())
    assert record["exception"][0]["exc_type"] == "ValueError"


def test_console_format_when_asked() -> None:
    out = io.StringIO()
    configure_logging(stream=out, json=False)
    structlog.get_logger().info("hello", who="world")
    text = out.getvalue()
    assert "hello" in text
    assert "who=world" in text
    assert not text.lstrip().startswith("{")


def test_verbosity_filters() -> None:
    out = io.StringIO()
    configure_logging(stream=out, verbosity=0, json=True)
    structlog.get_logger().debug("hidden")
    assert out.getvalue() == ""
    configure_logging(stream=out, verbosity=1, json=True)
    structlog.get_logger().debug("shown")
    assert "shown" in out.getvalue()
    assert level_for_verbosity(-1) == logging.WARNING
