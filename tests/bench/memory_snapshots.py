"""Where a benchmarked bridge's memory is: ``tracemalloc`` snapshots written while it runs.

The RSS a soak samples says how much, not what. With ``K8S_BRIDGE_BENCH_TRACEMALLOC=<dir>`` the
bench child traces Python allocations from its start and writes, every
``K8S_BRIDGE_BENCH_TRACEMALLOC_SECONDS`` (60), ``<dir>/memory-<seconds>.txt``: the RSS, the traced
current and peak, and the largest allocation sites by line. RSS minus the traced current is the
interpreter, extension modules and what the allocator keeps but Python has freed (fragmentation).
Tracing costs CPU and memory of its own: read such a run for memory only.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

__all__ = ["TRACEMALLOC_DIR", "TRACEMALLOC_SECONDS", "start_snapshots"]

TRACEMALLOC_DIR = os.environ.get("K8S_BRIDGE_BENCH_TRACEMALLOC", "")
TRACEMALLOC_SECONDS = float(os.environ.get("K8S_BRIDGE_BENCH_TRACEMALLOC_SECONDS", "60"))
TOP = 40


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _write(directory: Path, started: float) -> None:
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    lines = [
        f"rss_mib {_rss_mib():.1f}",
        f"traced_mib {current / 2**20:.1f}",
        f"traced_peak_mib {peak / 2**20:.1f}",
    ]
    for stat in snapshot.statistics("lineno")[:TOP]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:9d}  {frame.filename}:{frame.lineno}")
    seconds = round(time.monotonic() - started)
    (directory / f"memory-{seconds:05d}.txt").write_text("\n".join(lines) + "\n")


def start_snapshots(directory: Path) -> None:
    """Trace allocations from now on and write a snapshot every ``TRACEMALLOC_SECONDS`` from a daemon
    thread (it dies with the process; a snapshot holds the GIL while it is taken)."""
    directory.mkdir(parents=True, exist_ok=True)
    tracemalloc.start()
    started = time.monotonic()

    def loop() -> None:
        while True:
            time.sleep(TRACEMALLOC_SECONDS)
            _write(directory, started)

    threading.Thread(target=loop, name="memory snapshots", daemon=True).start()
