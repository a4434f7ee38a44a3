#!/usr/bin/env python3
"""STAND-IN SGLang server as a script (a test double, not SGLang), for unit tests that start it
on the controller. The server is the stand-in `sglang` package's (sglang_pkg/sglang/_standin.py,
one implementation); hosts get the package in their venv (prepare_sglang_host.yml).
`sglang_standin.py nvidia-smi ...` runs the nvidia-smi double (nvidia_smi.py)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "sglang_pkg"))

from sglang._standin import *  # noqa: E402,F403 - the tests read the module's names
from sglang._standin import main as _server_main  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["nvidia-smi"]:
        sys.path.insert(0, _HERE)
        import nvidia_smi

        return nvidia_smi.main(argv[1:])
    return _server_main(argv)


if __name__ == "__main__":
    sys.exit(main())
