"""Reconcilers: observed state -> actions, one module per controller (slurm, ray, mixing)."""
