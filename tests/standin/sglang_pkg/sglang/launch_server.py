"""STAND-IN `python -m sglang.launch_server`: the test double's server (sglang/_standin.py)."""

import sys

from sglang._standin import main

if __name__ == "__main__":
    sys.exit(main())
