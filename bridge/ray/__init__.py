"""``python -m bridge.ray``: the Ray bridge. RayJobs in shared RayClusters get dedicated, Kueue-admitted
workers; their entrypoint is gated on a per-job Ray resource only those workers advertise.

- :mod:`.gate`: the admission webhook's decision (pure); :mod:`.webhook`: its lookups in the caches;
- :mod:`.dashboard`: Ray's Job REST API on each shared head (status, and the cancel of a pending job);
- :mod:`.program`: the program on the shared shell; :mod:`.metrics`: its Prometheus metrics.
"""
