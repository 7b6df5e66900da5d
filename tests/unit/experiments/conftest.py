"""Experiment 002's simulator (``poolsim``) lives in its experiment's folder: put that folder on the path.

The experiment stays self-contained (its code, data and results in one folder) while its tests run in
the unit tier, so the simulator cannot rot unnoticed.
"""

from __future__ import annotations

import sys
from pathlib import Path

EXPERIMENT = Path(__file__).resolve().parents[3] / "experiments" / "002-one-pool-vs-static-split"
if str(EXPERIMENT) not in sys.path:
    sys.path.insert(0, str(EXPERIMENT))
