"""Structured logs: one JSON object per line in a container, readable colours on a terminal.

Log collectors in a cluster want one JSON object per line; a person at a terminal wants aligned,
coloured text. ``configure_logging`` picks by whether the stream is a terminal (and treats a pod as
never being one). Context bound with ``structlog.contextvars`` (the controller binds the reconcile
id, controller and key) appears in every line. Records from the standard ``logging`` module
(aiohttp, kubernetes-asyncio) are rendered by the same pipeline, so the output is uniform.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog
from structlog.typing import Processor

__all__ = ["CHATTY_LOGGERS", "configure_logging", "level_for_verbosity"]


CHATTY_LOGGERS = ("aiohttp.access", "kubernetes_asyncio")
"""Standard-library loggers kept at WARNING unless ``-vv``: chatty at INFO."""


def level_for_verbosity(verbosity: int) -> int:
    """``-v`` flags to a level: 0 -> INFO, 1 or more -> DEBUG, negative (``-q``) -> WARNING."""
    if verbosity > 0:
        return logging.DEBUG
    if verbosity < 0:
        return logging.WARNING
    return logging.INFO


def _in_container() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or os.path.exists("/.dockerenv")


def configure_logging(*, verbosity: int = 0, json: bool | None = None, stream: TextIO | None = None) -> None:
    """Configure structlog and the standard library's root logger.

    ``json=None`` chooses: JSON unless ``stream`` (default stderr) is a terminal outside a container.
    """
    out = stream if stream is not None else sys.stderr
    if json is None:
        json = _in_container() or not out.isatty()
    level = level_for_verbosity(verbosity)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Processor
    if json:
        shared.append(structlog.processors.dict_tracebacks)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    noisy_level = logging.DEBUG if verbosity > 1 else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(noisy_level)
