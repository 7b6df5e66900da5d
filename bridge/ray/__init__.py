"""The Ray bridge: RayJobs in shared RayClusters get dedicated, Kueue-admitted workers.

``bridge.ray.gate`` is the admission webhook's decision (pure); the program lives beside it.
"""
