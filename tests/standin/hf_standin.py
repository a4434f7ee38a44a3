#!/usr/bin/env python3
"""STAND-IN for huggingface_hub's `hf` CLI: a test double, not the Hugging Face client.

The Hugging Face hub cannot be reached from the test containers, so role model_cache's tests
point `model_cache_hf_cli` at this script. It implements the one command the role uses,

    hf download REPO_ID [--revision REV] [--max-workers N] [--include PATTERN ...]

and writes a small fake model into $HF_HOME/hub in the hub cache layout (blobs/,
snapshots/<commit>/ links, refs/<revision>), chunk by chunk through `*.incomplete` files,
resuming any it finds - what the real client does on an interrupted download.

Env: HF_STANDIN_FILES (default 3), HF_STANDIN_FILE_MIB (default 4), HF_STANDIN_CHUNK_DELAY
(seconds per 1 MiB chunk, default 0.02), HF_STANDIN_FAIL_AFTER_MIB (exit 1 after writing that
many MiB in this run: an interruption), HF_STANDIN_REQUIRE_TOKEN=1 (exit 1 without HF_TOKEN).
It never prints the token.
HF_STANDIN_RATE_MIB (MiB/s over the whole run, like a link of that speed; 0 = unlimited) and
HF_STANDIN_LOG (a file: one JSON line per run with the MiB it wrote, to prove a resume fetches
nothing twice). The token may also come from the file HF_TOKEN_PATH names, as the real
client reads it.
"""

import argparse
import hashlib
import json
import os
import sys
import time

MIB = 1 << 20


def _token() -> str:
    """HF_TOKEN, else the file HF_TOKEN_PATH names (huggingface_hub reads both)."""
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    path = os.environ.get("HF_TOKEN_PATH")
    try:
        with open(path or "", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


_LOGGED = [-1]  # the last MiB step logged


def _log(args, written: int, resumed: int, done: bool) -> None:
    """HF_STANDIN_LOG: a line each MiB and at the end: what this process wrote, and what it
    resumed from (a process killed mid-way under-reports by less than 1 MiB)."""
    path = os.environ.get("HF_STANDIN_LOG")
    if not path or (not done and written // MIB == _LOGGED[0]):
        return
    _LOGGED[0] = written // MIB
    line = {
        "pid": os.getpid(),
        "repo": args.repo_id,
        "revision": args.revision,
        "written_mib": written / MIB,
        "resumed_from_mib": resumed / MIB,
        "done": done,
        "token_seen": bool(_token()),
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="hf (stand-in)")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download")
    dl.add_argument("repo_id")
    dl.add_argument("--revision", default="main")
    dl.add_argument("--max-workers", type=int, default=8)
    dl.add_argument("--include", action="append", default=[])
    args = parser.parse_args()

    print(
        "hf (STAND-IN test double): the hub is unreachable here; writing a fake model", flush=True
    )
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        print("error: HF_HUB_OFFLINE=1, cannot download", file=sys.stderr)
        return 1
    if os.environ.get("HF_STANDIN_REQUIRE_TOKEN") == "1" and not _token():
        print("401 Client Error: a token is required for this repository", file=sys.stderr)
        return 1
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    repo = os.path.join(home, "hub", "models--" + args.repo_id.replace("/", "--"))
    commit = hashlib.sha1(f"{args.repo_id}@{args.revision}".encode()).hexdigest()
    snapshot = os.path.join(repo, "snapshots", commit)
    for sub_dir in ("blobs", "refs", snapshot):
        os.makedirs(os.path.join(repo, sub_dir), exist_ok=True)

    count = int(os.environ.get("HF_STANDIN_FILES", "3"))
    size = int(os.environ.get("HF_STANDIN_FILE_MIB", "4"))
    delay = float(os.environ.get("HF_STANDIN_CHUNK_DELAY", "0.02"))
    fail_after = int(os.environ.get("HF_STANDIN_FAIL_AFTER_MIB", "0"))
    files = {"config.json": json.dumps({"model_type": "standin", "repo": args.repo_id}).encode()}
    for index in range(count):
        files[f"model-{index + 1:05d}-of-{count:05d}.safetensors"] = None
    print(f"Fetching {len(files)} files", flush=True)

    rate = float(os.environ.get("HF_STANDIN_RATE_MIB", "0")) * MIB
    started = time.monotonic()
    written = 0
    resumed = 0
    for name, content in files.items():
        blob_id = hashlib.sha256(f"{commit}/{name}".encode()).hexdigest()
        blob = os.path.join(repo, "blobs", blob_id)
        if not os.path.exists(blob):
            partial = blob + ".incomplete"
            have = os.path.getsize(partial) if os.path.exists(partial) else 0
            total = len(content) if content is not None else size * MIB
            if have:
                print(f"resuming {name} at {have // MIB} MiB", flush=True)
                resumed += have
            with open(partial, "ab") as out:
                while have < total:
                    chunk = (
                        content[have:] if content is not None else b"\0" * min(MIB, total - have)
                    )
                    out.write(chunk)
                    out.flush()
                    have += len(chunk)
                    written += len(chunk)
                    time.sleep(delay)
                    if rate:
                        time.sleep(max(0.0, started + written / rate - time.monotonic()))
                    _log(args, written, resumed, done=False)
                    if fail_after and written >= fail_after * MIB:
                        print(f"error: connection reset while fetching {name}", file=sys.stderr)
                        return 1
            os.replace(partial, blob)
        link = os.path.join(snapshot, name)
        if not os.path.islink(link):
            os.symlink(os.path.relpath(blob, snapshot), link)
    with open(os.path.join(repo, "refs", args.revision), "w") as ref:
        ref.write(commit)
    _log(args, written, resumed, done=True)
    print(snapshot, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
