"""``python -m bridge.ray`` with every HTTP request it sends counted, for the Ray bridge benchmark.

The same wrapper as ``slurm_bridge_child.py`` (see ``http_counting.py``): the counter
``k8s_bridge_bench_http_requests_total{target, verb, resource}`` is served on the bridge's
``--metrics-bind-address`` beside its own metrics. Every request of the Ray bridge goes to the API
server (its calls to Ray's heads go through the service proxy: resource ``services/proxy``).

Usage: ``python ray_bridge_child.py <the arguments of python -m bridge.ray>``.
"""

from __future__ import annotations

import sys

from bridge.ray.program import main
from tests.bench.http_counting import install

if __name__ == "__main__":
    install()
    sys.exit(main(sys.argv[1:]))
