#!/usr/bin/env python3
"""All-reduce bus-bandwidth sweep, one process per GPU, under a hard timeout.

Shipped by the gpuhost `nccl` role and run with a Python that has torch (the python_env venv
or any torch on the host). For each candidate environment it starts one process per GPU
(torch.distributed, NCCL backend), all-reduces a bf16 buffer from min_bytes to max_bytes in
powers of two, CHECKS every reduced value (a broken P2P path gives wrong sums or hangs:
docs/reference.md section 5), times the operation with CUDA events and prints one JSON document on
stdout. NCCL's INFO log is captured so the caller can name the transport NCCL chose. It only
measures; pass/fail is decided by the role (plugins/plugin_utils/gpuhost_nccl_verify.py).

    python gpuhost_allreduce_sweep.py --config '{"candidates": [{"name": "derived", "env": {}}]}'

Config keys: candidates [{name, env}], min_bytes (32768), max_bytes (1073741824),
timeout_s per candidate (300), nproc (all GPUs), trials per size (3, fastest kept),
backend (nccl; gloo runs on CPUs to check the plumbing on a machine without GPUs, its
numbers mean nothing).

Across nodes (a serving group, issue 30): every node runs it with the same config plus its
own node_rank: nnodes (>= 2), node_rank (0..nnodes-1), master_addr (rank 0's address on the
network the nodes share, never loopback), master_port, nproc (GPUs per node, the same on
every node), join_timeout_s (how long the nodes wait for each other: min(120, timeout_s / 2)).
Global rank = node_rank * nproc + local GPU. Global rank 0 keeps torch.distributed's
TCPStore at master_addr:master_port (what init_method tcp:// builds), every rank records
itself there, and a rank that is not there by join_timeout_s is named in the error: a node
that never joins ends the run, it never hangs. One candidate only. Bad input exits 2 with a
message before torch is imported.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import sys
import tempfile
import time

SCRIPT_VERSION = 2
# NCCL INFO lines worth keeping: transports, version, environment, P2P refusals, warnings,
# and the network interface and transport NCCL uses across nodes.
_KEEP = re.compile(
    r" via |NCCL version|set by environment|P2P is disabled|NCCL WARN|NVLS multicast|nRanks"
    r"|NET/|Using network"
)
# A host name or an address, as it may be given for master_addr.
_ADDR = re.compile(r"[A-Za-z0-9:][A-Za-z0-9.:-]{0,252}")
_MAX_LOG_LINES = 400


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sizes(lo, hi):
    size, out = lo, []
    while size <= hi:
        out.append(size)
        size *= 2
    return out


def _iterations(size):
    # Enough repetitions that small messages are not one launch's noise, few for 1 GiB.
    return max(5, min(200, (4 << 30) // size))


def check_group(cfg):
    """Problems with the multi-node keys of cfg ([] when fine, or not multi-node). Pure:
    runs before torch is imported, so that bad input fails fast with exit status 2."""
    if "nnodes" not in cfg:
        return []

    def whole(key, low, high=None):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{key}: got {value!r}; allowed: an integer"
        if value < low or (high is not None and value > high):
            top = "" if high is None else f"..{high}"
            return f"{key}: got {value}; allowed: {low}{top if top else ' or more'}"
        return None

    errors = [whole("nnodes", 2), whole("nproc", 1), whole("master_port", 1, 65535)]
    nnodes = cfg.get("nnodes") if isinstance(cfg.get("nnodes"), int) else 0
    if nnodes >= 2:
        errors.append(whole("node_rank", 0, nnodes - 1))
    addr = str(cfg.get("master_addr") or "")
    try:
        loop = ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        loop = addr.lower() == "localhost" or addr.lower().startswith("localhost.")
    if not _ADDR.fullmatch(addr.strip("[]")):
        errors.append(f"master_addr: got {addr!r}; allowed: rank 0's IP address or host name")
    elif loop:
        errors.append(
            f"master_addr: got {addr!r}, a loopback address; allowed: rank 0's address on "
            "the network the nodes share (the other nodes cannot reach loopback)"
        )
    if len(cfg.get("candidates") or [None]) != 1:
        errors.append("candidates: allowed: exactly one across nodes (every node runs it once)")
    return [e for e in errors if e]


def _missing(store, world):
    return [r for r in range(world) if not store.check([f"gpuhost/joined/{r}"])]


def _join(dist, rank, world, cfg):
    """The store rank 0 keeps at master_addr:master_port; every rank records itself, and
    waits (bounded) for the others. Raises naming the ranks that never joined."""
    from datetime import timedelta

    nproc = int(cfg["nproc"])
    wait = float(cfg.get("join_timeout_s") or min(120.0, float(cfg["timeout_s"]) / 2))
    addr, port = str(cfg["master_addr"]).strip("[]"), int(cfg["master_port"])
    try:
        store = dist.TCPStore(
            addr,
            port,
            is_master=rank == 0,
            timeout=timedelta(seconds=wait),
            wait_for_workers=False,
        )
    except Exception as exc:
        raise RuntimeError(
            f"rank 0's store at {addr}:{port} did not answer within {wait:g} s: node 0 never "
            f"started, or a firewall drops the port ({type(exc).__name__}: {exc})"
        ) from exc
    store.set(f"gpuhost/joined/{rank}", str(cfg["node_rank"]))
    deadline = time.monotonic() + wait
    missing = _missing(store, world)
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = _missing(store, world)
    if missing:
        nodes = sorted({r // nproc for r in missing})
        raise RuntimeError(
            f"rank(s) {', '.join(map(str, missing))} (node(s) {', '.join(map(str, nodes))}) "
            f"never joined at {addr}:{port} within {wait:g} s"
        )
    return store


def _done(store, rank, world):
    """Rank 0 keeps the store until every rank is through (bounded), so none loses it."""
    store.set(f"gpuhost/done/{rank}", "1")
    if rank != 0:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(store.check([f"gpuhost/done/{r}"]) for r in range(world)):
            return
        time.sleep(0.2)


def _worker(rank, world, port, cfg, out_dir):
    """One local rank: writes rank<N>.jsonl with one line per size, then a final status
    line. Across nodes its global rank is node_rank * nproc + rank."""
    path = os.path.join(out_dir, f"rank{rank}.jsonl")
    with open(path, "w", buffering=1) as out:
        try:
            import torch
            import torch.distributed as dist

            gloo = cfg.get("backend") == "gloo"
            device = torch.device("cpu") if gloo else torch.device("cuda", rank)
            if not gloo:
                torch.cuda.set_device(device)
            store = None
            if "nnodes" in cfg:
                local, rank = rank, int(cfg["node_rank"]) * int(cfg["nproc"]) + rank
                store = _join(dist, rank, world, cfg)
                dist.init_process_group(
                    "gloo" if gloo else "nccl",
                    store=dist.PrefixStore("gpuhost/pg", store),
                    rank=rank,
                    world_size=world,
                )
                out.write(json.dumps({"joined": rank, "local": local}) + "\n")
            else:
                dist.init_process_group(
                    "gloo" if gloo else "nccl",
                    init_method=f"tcp://127.0.0.1:{port}",
                    rank=rank,
                    world_size=world,
                )
            dtype = torch.float32 if gloo else torch.bfloat16
            width = torch.tensor([], dtype=dtype).element_size()
            # Rank-dependent integers whose partial sums stay exact in bf16 (<= 256) for up to
            # 8 ranks: a value from the wrong peer, or none, shows as a wrong sum.
            period = 4 if world <= 8 else 2
            total = world * (world + 1) // 2
            trials = int(cfg.get("trials", 3))
            # Bring the clocks up before the first (small, latency-bound) size is timed.
            warm = torch.zeros((64 << 20) // width, dtype=dtype, device=device)
            for _ in range(10):
                dist.all_reduce(warm)
            del warm
            for size in _sizes(cfg["min_bytes"], cfg["max_bytes"]):
                numel = size // width
                base = (torch.arange(numel, device=device, dtype=torch.int32) % period + 1).to(
                    dtype
                )
                buf = base * (rank + 1)
                dist.all_reduce(buf)
                if not gloo:
                    torch.cuda.synchronize()
                expected = base * total
                if world <= 8:
                    correct = bool(torch.equal(buf, expected))
                else:
                    correct = bool(torch.allclose(buf, expected, rtol=1e-2))
                del base, expected
                buf.zero_()
                iters = _iterations(size)
                for _ in range(3):
                    dist.all_reduce(buf)
                # Several timed trials, the fastest kept: noise (an interrupt, a clock dip,
                # another process) only ever adds time, and must not decide a comparison
                # between environments.
                samples = []
                for _ in range(trials):
                    if gloo:
                        start = time.perf_counter()
                        for _ in range(iters):
                            dist.all_reduce(buf)
                        samples.append((time.perf_counter() - start) * 1e6 / iters)
                        continue
                    torch.cuda.synchronize()
                    begin = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    begin.record()
                    for _ in range(iters):
                        dist.all_reduce(buf)
                    end.record()
                    end.synchronize()
                    samples.append(begin.elapsed_time(end) * 1000.0 / iters)
                del buf
                row = {
                    "bytes": size,
                    "time_us": min(samples),
                    "trials_us": [round(s, 2) for s in samples],
                    "correct": correct,
                    "iters": iters,
                }
                out.write(json.dumps(row) + "\n")
            dist.destroy_process_group()
            if store is not None:
                _done(store, rank, world)
            out.write(json.dumps({"done": True}) + "\n")
        except Exception as exc:  # reported to the parent, which names the failure
            out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            raise SystemExit(1) from exc


def _read_rank(path):
    rows, done, error = [], False, None
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if "bytes" in item:
                    rows.append(item)
                done = done or item.get("done", False)
                error = error or item.get("error")
    return rows, done, error


def _nccl_log(log_dir):
    kept = []
    for name in sorted(glob.glob(os.path.join(log_dir, "nccl.*.log"))):
        with open(name, errors="replace") as handle:
            kept.extend(line.rstrip("\n") for line in handle if _KEEP.search(line))
    return kept[:_MAX_LOG_LINES]


def run_candidate(cand, cfg, world, local=None):
    """Start one process per GPU with the candidate's environment; kill them at the timeout.
    world: ranks in all; local: ranks on this node (across nodes nproc, else world)."""
    local = world if local is None else local
    tmp = tempfile.mkdtemp(prefix="gpuhost-sweep-")
    saved = dict(os.environ)
    started = time.monotonic()
    try:
        for key, value in (cand.get("env") or {}).items():
            os.environ[key] = str(value)
        # NCCL names the transport it chose only at INFO level; into files, not the console.
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_FILE"] = os.path.join(tmp, "nccl.%h.%p.log")
        ctx = mp.get_context("spawn")
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, world, port, cfg, tmp)) for r in range(local)]
        for proc in procs:
            proc.start()
        deadline = started + float(cfg["timeout_s"])
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
            if any(p.exitcode not in (None, 0) for p in procs):
                # One rank died: the others would wait for it forever.
                time.sleep(2)
                break
        timed_out = any(p.is_alive() for p in procs) and time.monotonic() >= deadline
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
        per_rank = [_read_rank(os.path.join(tmp, f"rank{r}.jsonl")) for r in range(local)]
        errors = [e for _, _, e in per_rank if e]
        rows = []
        sizes = [row["bytes"] for row in per_rank[0][0]]
        for index, size in enumerate(sizes):
            got = [rank_rows[index] for rank_rows, _, _ in per_rank if len(rank_rows) > index]
            if len(got) < local:
                break
            # The slowest rank defines the collective's time.
            time_us = max(g["time_us"] for g in got)
            algbw = size / (time_us * 1e-6) / 1e9
            rows.append(
                {
                    "bytes": size,
                    "time_us": round(time_us, 3),
                    "trials_us": max((g["trials_us"] for g in got), key=sum),
                    "algbw_gbps": round(algbw, 3),
                    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce.
                    "busbw_gbps": round(algbw * 2 * (world - 1) / world, 3),
                    "correct": all(g["correct"] for g in got),
                }
            )
        done = all(d for _, d, _ in per_rank)
        error = None
        if timed_out:
            total = len(_sizes(cfg["min_bytes"], cfg["max_bytes"]))
            error = f"timed out after {cfg['timeout_s']} s, {len(rows)} of {total} sizes done"
        elif errors:
            error = errors[0]
        elif not done:
            error = "a rank exited early: " + ", ".join(str(p.exitcode) for p in procs)
        return {
            "name": cand["name"],
            "env": dict(cand.get("env") or {}),
            "ok": done and not error,
            "timed_out": timed_out,
            "error": error,
            "rows": rows,
            "nccl_log": _nccl_log(tmp),
            "wall_s": round(time.monotonic() - started, 1),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(tmp, ignore_errors=True)


def _host_info(cfg):
    import torch

    info = {"torch": torch.__version__, "nccl_version": None, "gpus": []}
    if cfg.get("backend") != "gloo":
        info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="JSON text, or @path to a JSON file")
    parser.add_argument("--version-only", action="store_true", help="print torch/NCCL versions")
    args = parser.parse_args(argv)
    text = args.config
    if text.startswith("@"):
        with open(text[1:]) as handle:
            text = handle.read()
    cfg = {"min_bytes": 32 << 10, "max_bytes": 1 << 30, "timeout_s": 300, "backend": "nccl"}
    try:
        cfg.update(json.loads(text))
    except ValueError as exc:
        print(f"gpuhost_allreduce_sweep: --config is not JSON: {exc}", file=sys.stderr)
        return 2
    problems = check_group(cfg)
    if problems:
        print("gpuhost_allreduce_sweep: bad input: " + "; ".join(problems), file=sys.stderr)
        return 2
    info = _host_info(cfg)
    if args.version_only:
        print(json.dumps(info))
        return 0
    local = int(cfg.get("nproc") or (len(info["gpus"]) if cfg["backend"] != "gloo" else 2))
    nnodes = int(cfg.get("nnodes") or 1)
    world = local * nnodes
    result = {
        "script_version": SCRIPT_VERSION,
        **info,
        "world_size": world,
        "inherited_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "runs": [],
    }
    if nnodes > 1:
        first = int(cfg["node_rank"]) * local
        result.update(
            nnodes=nnodes,
            node_rank=cfg["node_rank"],
            master=f"{cfg['master_addr']}:{cfg['master_port']}",
            ranks=list(range(first, first + local)),
        )
    if cfg["backend"] != "gloo" and local > len(info["gpus"]):
        result["error"] = f"nproc {local}: this node has {len(info['gpus'])} GPU(s)"
    elif world < 2:
        result["error"] = f"{world} GPU(s): an all-reduce needs two"
    else:
        for cand in cfg.get("candidates") or [{"name": "derived", "env": {}}]:
            print(f"sweep {cand['name']}: {json.dumps(cand.get('env') or {})}", file=sys.stderr)
            run = run_candidate(cand, cfg, world, local)
            peak = max((r["busbw_gbps"] for r in run["rows"]), default=0.0)
            print(
                f"  {run['name']}: ok={run['ok']} peak busbw {peak:.1f} GB/s, {run['wall_s']} s"
                + (f", error: {run['error']}" if run["error"] else ""),
                file=sys.stderr,
            )
            result["runs"].append(run)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
