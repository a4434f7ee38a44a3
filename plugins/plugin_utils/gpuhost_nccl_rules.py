"""The NCCL decision table as code: for two or more GPUs, which NCCL variables to set, each
with its reason and the source it rests on (sglang's custom all-reduce: gpuhost_nccl_car.py).

The table and its full references are in roles/nccl/README.md. Pure: gpuhost_nccl.decide()
calls these rules with the input it checked and the GPU pairs it summarised (`s`), then
applies the user's overrides; tests/test_nccl_decide.py asserts each rule per topology.
"""

from __future__ import annotations

# Sources cited by the reasons (full references in roles/nccl/README.md).
SRC_ENV = (
    "NCCL docs, Environment Variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)"
)
SRC_PATHS = (
    "NVIDIA/nccl src/graph/paths.cc ncclTopoCheckP2p (default p2pLevel PATH_PXB; NVML P2P status)"
)
SRC_REF4 = "docs/reference.md section 4 (NCCL), measured on 2x H200 NVLink"
SRC_SEED = "docs/reference.md sections 1 and 4 (seed recipe; 8x PRO 6000 bare metal 22 -> 38 GB/s)"
SRC_FACTS = "gpuhost preflight facts (docs/facts.md)"
SRC_CTAS = (
    "NCCL docs, nccl4py NCCLConfig min_ctas/max_ctas (up to 32, defaults 1/32); NVIDIA/nccl "
    "src/graph/search.cc (channels from a discrete per-channel bandwidth search)"
)
SRC_PAIR = "gpuhost tests/fixtures/nccl/h200x2-autotune*.json (2x H200 NV18, NCCL 2.28.9, runs A+B)"
SRC_LISTEN = (
    "NCCL docs, NCCL_SOCKET_IFNAME; gpuhost tests/fixtures/gpu-hosts/h200x1-listen (NCCL 2.28.9: "
    "bootstrap, proxy and gloo sockets on the LAN address by default, on 127.0.0.1 with lo)"
)

# The interface NCCL's (and, as measured, gloo's) own sockets bind to on one node.
SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
SOCKET_IFNAME_ONE_NODE = "lo"

# Channel/CTA floor for the shared-memory path: the seed's value (docs/reference.md §1, §4).
MIN_CTAS = 8
# NCCL's documented ceiling for min_ctas/max_ctas (default max): "positive integer up to 32".
MAX_CTAS = 32
# NCCL_MIN_CTAS replaced NCCL_MIN_NCHANNELS with the communicator config in NCCL 2.17.
MIN_CTAS_SINCE = (2, 17)


def reason(variable, value, reason, source):
    """One item of the decision's `reasons`: `variable` is `value` (None: not set) because."""
    return {"variable": variable, "value": value, "reason": reason, "source": source}


def socket_ifname(overrides):
    """The NCCL_SOCKET_IFNAME a host with GPUs runs with: loopback unless nccl_env_overrides
    names one (None: the override unsets it and NCCL picks an interface)."""
    overrides = overrides or {}
    if SOCKET_IFNAME in overrides:
        value = overrides[SOCKET_IFNAME]
        return None if value is None else str(value)
    return SOCKET_IFNAME_ONE_NODE


def local_sockets():
    """(env, reason) for any host with a GPU: NCCL's bootstrap and proxy sockets, and gloo's,
    listen on ephemeral ports of the interface NCCL picks (the LAN one, even with one GPU):
    no port rule can cover them, so on one node they stay on loopback."""
    why = (
        "one node: NCCL's bootstrap/proxy sockets (and gloo's) listen on ephemeral ports of "
        "the interface NCCL picks, the LAN one by default; on loopback no firewall rule is "
        "needed for them (multi-node: set it in nccl_env_overrides)"
    )
    return {SOCKET_IFNAME: SOCKET_IFNAME_ONE_NODE}, reason(
        SOCKET_IFNAME, SOCKET_IFNAME_ONE_NODE, why, SRC_LISTEN
    )


def min_ctas_name(version):
    """(the channel-floor variable this NCCL version reads, the other spelling)."""
    if version is None or version >= MIN_CTAS_SINCE:
        return "NCCL_MIN_CTAS", "NCCL_MIN_NCHANNELS"
    return "NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"


def derive_env(inp, s, version):
    """(env, reasons, warnings) for two or more GPUs; `s` is gpuhost_nccl's pair summary."""
    env, reasons, warnings = {}, [], []
    vtext = ".".join(map(str, version)) if version else "unknown"

    # P2P level: only where the driver grants P2P on a path NCCL's default refuses.
    if s["p2p_none"]:
        why = (
            "not set: the driver reports no GPU pair P2P-capable (topo -p2p), so NCCL ignores "
            "any level and uses SHM through host memory"
            if s["known"]
            else "not set: P2P status unknown (no topology facts); NCCL decides at run time"
        )
        reasons.append(reason("NCCL_P2P_LEVEL", None, why, SRC_PATHS))
    elif s["widen"]:
        env["NCCL_P2P_LEVEL"] = "PHB"
        reasons.append(
            reason(
                "NCCL_P2P_LEVEL",
                "PHB",
                f"{len(s['widen'])} P2P-capable pair(s) connect through the CPU host bridge "
                "(PHB/NODE); NCCL's default stops at PXB and would route them through host "
                "memory. SYS pairs stay on SHM (NCCL default); verify measures the result",
                f"{SRC_PATHS}; {SRC_ENV} (NCCL_P2P_LEVEL=PHB: same NUMA node)",
            )
        )
    else:
        reasons.append(
            reason(
                "NCCL_P2P_LEVEL",
                None,
                "not set: every P2P-capable pair is NVLink or behind PCIe switches, which "
                "NCCL's default level (PXB) already covers",
                SRC_PATHS,
            )
        )
    if s["sys_ok"]:
        reasons.append(
            reason(
                "NCCL_P2P_LEVEL",
                env.get("NCCL_P2P_LEVEL"),
                f"{len(s['sys_ok'])} P2P-capable pair(s) cross NUMA nodes (SYS): left to NCCL's "
                "default (no P2P across the SMP interconnect); autotune can try SYS",
                f"{SRC_PATHS}; {SRC_ENV}",
            )
        )

    # P2P is never disabled: with NVLink it costs >10x, without P2P it is already off.
    reasons.append(
        reason(
            "NCCL_P2P_DISABLE",
            None,
            "never set: on NVLink it drops busbw >10x (332 -> 29 GB/s on 2x H200); where the "
            "driver grants no P2P, NCCL already does not use it",
            SRC_REF4,
        )
    )
    reasons.append(
        reason(
            "NCCL_SHM_DISABLE",
            None,
            "never set on one host: it forces the network transport between local GPUs "
            "(4.4 GB/s on 2x H200)",
            f"{SRC_ENV}; {SRC_REF4}",
        )
    )
    reasons.append(
        reason(
            "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
            None,
            "not set: it only affects P2P over the network transport, unused inside one host",
            f"{SRC_ENV}; {SRC_REF4}",
        )
    )

    # InfiniBand: only switched off where there is none.
    ib = inp.get("ib_present")
    if ib is False:
        env["NCCL_IB_DISABLE"] = "1"
        reasons.append(
            reason(
                "NCCL_IB_DISABLE",
                "1",
                "no InfiniBand/RoCE device (/sys/class/infiniband empty): NCCL skips the IB "
                "probe at init; harmless without IB",
                f"{SRC_ENV}; {SRC_REF4}",
            )
        )
    else:
        reasons.append(
            reason(
                "NCCL_IB_DISABLE",
                None,
                "not set: an IB device is present (multi-host traffic needs it)"
                if ib
                else "not set: IB presence unknown, so IB is left to NCCL",
                SRC_ENV,
            )
        )

    # Channel floor: only where some pair goes through host memory (SHM).
    name, other = min_ctas_name(version)
    if s["class"] == "pcie_no_p2p":
        env[name] = str(MIN_CTAS)
        reasons.append(
            reason(
                name,
                str(MIN_CTAS),
                f"some GPU pairs have no usable P2P, so NCCL moves data through host memory "
                f"(SHM); a floor of {MIN_CTAS} channels lifted busbw 22 -> 38 GB/s on 8x PRO "
                f"6000. Named for NCCL {vtext}: NCCL_MIN_CTAS from 2.17, NCCL_MIN_NCHANNELS "
                "before (unknown versions get NCCL_MIN_CTAS: the pinned torch ships >= 2.27)",
                f"{SRC_SEED}; {SRC_ENV} (NCCL_MIN_CTAS since 2.17)",
            )
        )
    elif s["class"] == "nvlink" and inp["gpu_count"] == 2:
        env[name] = str(MAX_CTAS)
        reasons.append(
            reason(
                name,
                str(MAX_CTAS),
                "two GPUs joined by NVLink: NCCL sizes its channels by a discrete bandwidth "
                "search and stops below its CTA ceiling (24 channels on NV18 H200); the ceiling, "
                f"{MAX_CTAS}, lifted busbw 3-4% at 64 MiB..1 GiB on two machines, small-message "
                "latency within noise. It holds up to 32 SMs while a collective runs: where the "
                "server overlaps communication with compute, set it to null in "
                f"nccl_env_overrides. Named for NCCL {vtext}",
                f"{SRC_CTAS}; {SRC_PAIR}",
            )
        )
    elif s["class"] == "nvlink":
        reasons.append(
            reason(
                name,
                None,
                "not set: more than two NVLink GPUs (NVSwitch or a mesh); NCCL's own channel and "
                "NVLS tuning is left alone (the CTA ceiling is measured on pairs only; autotune "
                f"tries {MAX_CTAS})",
                SRC_CTAS,
            )
        )
    else:
        reasons.append(
            reason(
                name,
                None,
                "not set: all GPU pairs use P2P over PCIe; NCCL sizes its channels for the link "
                f"itself (unmeasured here; autotune tries {MAX_CTAS})",
                SRC_ENV,
            )
        )
    reasons.append(reason(other, None, f"not set: the name for NCCL {vtext} is {name}", SRC_ENV))

    if s["nvlink_no_p2p"]:
        warnings.append(
            f"{len(s['nvlink_no_p2p'])} NVLink pair(s) without P2P in the driver: NCCL "
            "refuses to start there (paths.cc 'P2P is disabled between NVLINK connected "
            "GPUs'); check the NVLink/fabric state before serving"
        )
    return env, reasons, warnings
