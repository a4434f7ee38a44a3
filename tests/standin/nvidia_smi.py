#!/usr/bin/env python3
"""STAND-IN `nvidia-smi` (a gpuhost test double, not NVIDIA's tool), for hosts without a GPU.

Test setups place it where the real one lives (prepare_sglang_host.yml: /usr/bin/nvidia-smi),
so preflight's GPU read and the bench's GPU sampler run their real paths against it:

- `-q -x`, `topo -m`, `topo -p2p r|w` and `--query-gpu=index,pci.bus_id,compute_cap` replay a
  recorded host (tests/fixtures/gpu-hosts/<name>/: nvidia-smi-q.xml, topo-m.txt,
  topo-p2p-r.txt, topo-p2p-w.txt, query-gpu.csv) from the directory in $NVIDIA_SMI_STANDIN_DIR,
  else nvidia-smi.d/ next to this file;
- `dmon ...` prints one made sample line a second until stopped, under a STAND-IN line (the
  sampler's parser marks such samples `standin`); `--query-gpu=<limits>` prints made limits:
  numbers modelled on the reference deployment's account (busy 100%, 55% of a 600 W limit,
  52% memory bandwidth, ~1 GB/s PCIe).

The driver it reports is the recording's, unless the stand-in NVIDIA driver package
(molecule/nvidia/standin_repo.py: /usr/src/nvidia-<version>/STAND-IN) is installed: then it is
that package's version, as the host would report after booting the driver apt installed (a
container never reboots; the role records the reboot it needs). So a host whose driver comes
from the stand-in repository reads as one apt manages, before and after a branch change.
"""

import glob
import os
import re
import signal
import sys
import time

REPLAY = {
    ("-q", "-x"): "nvidia-smi-q.xml",
    ("topo", "-m"): "topo-m.txt",
    ("topo", "-p2p", "r"): "topo-p2p-r.txt",
    ("topo", "-p2p", "w"): "topo-p2p-w.txt",
    ("--query-gpu=index,pci.bus_id,compute_cap", "--format=csv,noheader"): "query-gpu.csv",
}


def installed_standin_driver() -> str | None:
    """The newest stand-in driver package's version on this host, or None."""
    found = []
    for marker in glob.glob("/usr/src/nvidia-*/STAND-IN"):
        version = os.path.basename(os.path.dirname(marker))[len("nvidia-") :]
        if re.fullmatch(r"[0-9]+(\.[0-9]+)+", version):
            found.append(tuple(int(p) for p in version.split(".")))
    return ".".join(map(str, max(found))) if found else None


def dmon() -> int:
    print("# STAND-IN nvidia-smi (gpuhost test double): made numbers, not a GPU", flush=True)
    print("#Time         gpu    pwr  gtemp    sm    mem   mclk   pclk  pviol  tviol  rxpci  txpci")
    print("#HH:MM:SS     Idx      W      C     %      %    MHz    MHz      %   bool   MB/s   MB/s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    made = "0    330     60   100     52  14001   2400      0      0    600    400"
    while True:
        print(f" {time.strftime('%H:%M:%S')}       {made}", flush=True)
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    recorded = REPLAY.get(tuple(argv))
    if recorded:
        here = os.path.dirname(os.path.realpath(__file__))
        folder = os.environ.get("NVIDIA_SMI_STANDIN_DIR") or os.path.join(here, "nvidia-smi.d")
        try:
            with open(os.path.join(folder, recorded)) as f:
                text = f.read()
        except OSError as exc:
            print(f"stand-in nvidia-smi: no recording for {argv}: {exc}", file=sys.stderr)
            return 9
        driver = installed_standin_driver()
        if driver:
            text = re.sub(
                r"<driver_version>[^<]*</driver_version>",
                f"<driver_version>{driver}</driver_version>",
                text,
            )
        sys.stdout.write(text)
        return 0
    if argv[:1] == ["dmon"]:
        return dmon()
    if any(a.startswith("--query-gpu=") for a in argv):
        # index, power.limit, clocks.max.sm, pcie.link.gen.max, pcie.link.width.max
        print("0, 600.00, 2600, 5, 16")
        return 0
    print(f"stand-in nvidia-smi: not recorded: {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
