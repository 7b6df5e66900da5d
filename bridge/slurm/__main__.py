"""``python -m bridge.slurm``: run the Slurm bridge (see :mod:`bridge.slurm.program`)."""

import sys

from bridge.slurm.program import main

if __name__ == "__main__":
    sys.exit(main())
