"""``python -m bridge.ray``: run the Ray bridge (see :mod:`bridge.ray.program`)."""

import sys

from bridge.ray.program import main

if __name__ == "__main__":
    sys.exit(main())
