"""The bridge's CPU by phase and by component, from cProfile in the bench's bridge child.

Why a profiler and not only ``/proc/<pid>/stat``: the process's CPU says how much, not where. With
``K8S_BRIDGE_BENCH_PROFILE=<dir>`` set, ``slurm_bridge_child.py`` runs the bridge's event loop under
cProfile; the benchmark names the phase that just ended in ``<dir>/phase`` and sends SIGUSR1, and the
child writes ``<dir>/<phase>.prof`` and starts a fresh profile. :func:`component_split` sums each
function's own time (``tottime``) into the groups below by the file it lives in, so the groups add
up to the profiled total. cProfile sees the main thread (the event loop) only; work handed to
executor threads is not in it, and its own overhead slows the profiled run, so a profiled run's
rates are not compared with Kueue's: a separate unprofiled run gives those.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

PROFILE_DIR = os.environ.get("K8S_BRIDGE_BENCH_PROFILE", "")

GROUPS: Sequence[tuple[str, Sequence[str]]] = (
    ("job source", ("bridge/slurm/source", "bridge/slurm/node_poll", "bridge/slurm/")),
    ("Slurm REST", ("bridge/slurmrest/",)),
    ("translation", ("translators/",)),
    ("reconcile", ("reconcilers/", "bridge/admission")),
    ("Kubernetes API", ("bridge/runtime/", "kubernetes_asyncio/")),
    ("HTTP + TLS (both clients)", ("aiohttp/", "yarl/", "multidict/", "/ssl.py", "_ssl.")),
    ("JSON", ("json/", "_json", "orjson", "msgspec")),
    ("models (pydantic)", ("pydantic",)),
    ("logging", ("structlog/", "logging/")),
    ("metrics", ("prometheus_client/",)),
    ("event loop", ("asyncio/", "selectors", "select.")),
)


def group_of(filename: str) -> str:
    for name, needles in GROUPS:
        if any(needle in filename for needle in needles):
            return name
    return "other"


def component_split(path: Path) -> dict[str, Any]:
    """Own CPU seconds by component group, and the top functions by own time."""
    stats: Any = pstats.Stats(str(path))
    groups: dict[str, float] = {}
    top: list[tuple[float, str]] = []
    for (filename, line, func), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        name = group_of(filename if filename != "~" else func)
        groups[name] = groups.get(name, 0.0) + tottime
        top.append((tottime, f"{filename.rsplit('site-packages/', 1)[-1]}:{line}({func})"))
    total = sum(groups.values())
    return {
        "profiled_seconds": round(total, 3),
        "by_component_seconds": {k: round(v, 3) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top_own_time": [f"{t:.3f} {where}" for t, where in sorted(top, reverse=True)[:15]],
    }


# --- in the child ------------------------------------------------------------------------------------


class PhaseProfiler:
    """cProfile over the main thread, dumped per phase on SIGUSR1 (the phase's name read from a file)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.profile = cProfile.Profile()

    def start(self) -> None:
        signal.signal(signal.SIGUSR1, self._dump)
        self.profile.enable()

    def _dump(self, _signum: int, _frame: FrameType | None) -> None:
        self.profile.disable()
        phase = (self.directory / "phase").read_text().strip() or "unnamed"
        self.profile.dump_stats(str(self.directory / f"{phase}.prof"))
        self.profile = cProfile.Profile()
        self.profile.enable()


# --- in the benchmark --------------------------------------------------------------------------------


def end_phase(pid: int, phase: str, *, timeout: float = 30.0) -> dict[str, Any] | None:
    """Ask the profiled child to dump the phase that just ended; its component split (None unprofiled)."""
    if not PROFILE_DIR:
        return None
    directory = Path(PROFILE_DIR)
    target = directory / f"{phase}.prof"
    target.unlink(missing_ok=True)
    (directory / "phase").write_text(phase)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    size = -1
    while time.monotonic() < deadline:
        if target.exists() and target.stat().st_size == size > 0:
            return component_split(target)
        size = target.stat().st_size if target.exists() else -1
        time.sleep(0.2)
    raise AssertionError(f"the bridge wrote no profile for {phase} in {timeout:.0f}s")
