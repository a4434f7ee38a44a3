"""Three phases of GPU load for the day-2 captures (tests/device/day2.sh), each --seconds
long and announced on stdout with a UTC time: `compute` (bf16 8192^3 matmuls: SMs and
power), `memory` (device-to-device copies of 4 GiB: HBM bandwidth) and `pcie` (pinned host
to device copies of 1 GiB: PCIe). Not a benchmark: it makes each resource the bound one so
the samplers see what each looks like."""

from __future__ import annotations

import argparse
import datetime
import time

import torch


def say(text: str) -> None:
    print(f"{datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')} {text}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    src = torch.empty(4 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dev_in = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    phases = {
        "compute": lambda: torch.matmul(a, b),
        "memory": lambda: dst.copy_(src),
        "pcie": lambda: dev_in.copy_(host, non_blocking=True),
    }
    for name, step in phases.items():
        say(f"phase {name} start")
        end, n = time.monotonic() + args.seconds, 0
        while time.monotonic() < end:
            for _ in range(8):
                step()
            torch.cuda.synchronize()
            n += 8
        say(f"phase {name} end ({n} steps)")


if __name__ == "__main__":
    main()
