"""What NVML (the nvidia-ml-py binding) reports per GPU, as JSON: clocks event reasons,
power against its limits, utilisation, PCIe throughput, memory errors and, on Hopper and
later, GPM metrics (SM activity, occupancy, DRAM bandwidth) over one second. Each call that
fails is recorded with its error instead of stopping the dump (tests/device/day2.sh)."""

from __future__ import annotations

import json
import sys
import time

import pynvml as nv


def attempt(fn, *args):
    try:
        value = fn(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "_fields_"):
        return {name: getattr(value, name) for name, _ in value._fields_}
    return value


def gpm(handle):
    names = ["SM_UTIL", "SM_OCCUPANCY", "DRAM_BW_UTIL", "GRAPHICS_UTIL", "ANY_TENSOR_UTIL"]
    ids = [(n, getattr(nv, f"NVML_GPM_METRIC_{n}", None)) for n in names]
    ids = [(n, i) for n, i in ids if i is not None]
    try:
        if not nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return {"supported": False}
        s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(handle, s1)
        time.sleep(1.0)
        nv.nvmlGpmSampleGet(handle, s2)
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(ids)
        req.sample1, req.sample2 = s1, s2
        for k, (_, metric) in enumerate(ids):
            req.metrics[k].metricId = metric
        nv.nvmlGpmMetricsGet(req)
        return {"supported": True, **{n: req.metrics[k].value for k, (n, _) in enumerate(ids)}}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    nv.nvmlInit()
    out = {
        "driver": attempt(nv.nvmlSystemGetDriverVersion),
        "nvml": attempt(nv.nvmlSystemGetNVMLVersion),
        "cuda_driver": attempt(nv.nvmlSystemGetCudaDriverVersion_v2),
        "binding": getattr(nv, "__version__", "?"),
        "gpus": [],
    }
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out["gpus"].append(
            {
                "index": i,
                "name": attempt(nv.nvmlDeviceGetName, h),
                "clocks_event_reasons": attempt(nv.nvmlDeviceGetCurrentClocksEventReasons, h),
                "power_mw": attempt(nv.nvmlDeviceGetPowerUsage, h),
                "power_limit_mw": attempt(nv.nvmlDeviceGetEnforcedPowerLimit, h),
                "power_default_mw": attempt(nv.nvmlDeviceGetPowerManagementDefaultLimit, h),
                "utilization": attempt(nv.nvmlDeviceGetUtilizationRates, h),
                "pcie_tx_kbs": attempt(
                    nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES
                ),
                "pcie_rx_kbs": attempt(
                    nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES
                ),
                "pcie_gen": [
                    attempt(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    attempt(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                ],
                "sm_clock_mhz": [
                    attempt(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    attempt(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                ],
                "remapped_rows": attempt(nv.nvmlDeviceGetRemappedRows, h),
                "ecc_volatile_uncorrected": attempt(
                    nv.nvmlDeviceGetTotalEccErrors,
                    h,
                    nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nv.NVML_VOLATILE_ECC,
                ),
                "persistence": attempt(nv.nvmlDeviceGetPersistenceMode, h),
                "processes": [
                    {"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) >> 20}
                    for p in (attempt(nv.nvmlDeviceGetComputeRunningProcesses, h) or [])
                    if hasattr(p, "pid")
                ],
                "gpm": gpm(h),
            }
        )
    json.dump(out, sys.stdout, indent=1, default=str)
    print()


if __name__ == "__main__":
    main()
