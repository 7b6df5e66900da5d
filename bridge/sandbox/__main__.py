"""``python -m bridge.sandbox``: start the local stack and keep it running until interrupted."""

from __future__ import annotations

import sys

from bridge.sandbox.stack import main

if __name__ == "__main__":
    sys.exit(main())
