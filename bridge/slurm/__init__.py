"""``python -m bridge.slurm``: the Slurm bridge program.

The Slurm job and node sources (:mod:`.source`), the bridge's Slurm metrics (:mod:`.metrics`) and the
program (:mod:`.program`) that wires them and ``reconcilers/slurm.py`` onto the shared program shell
(:mod:`bridge.program`). The slurmrestd client itself is :mod:`bridge.slurmrest`.
"""
