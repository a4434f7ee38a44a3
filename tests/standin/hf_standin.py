#!/usr/bin/env python3
"""STAND-IN for huggingface_hub's `hf` CLI: a test double, not the Hugging Face client.

The Hugging Face hub cannot be reached from the test containers, so role model_cache's tests
point `model_cache_hf_cli` at this script. It implements the one command the role uses,

    hf download REPO_ID [--revision REV] [--max-workers N] [--include PATTERN ...]

and writes a small fake model into $HF_HOME/hub in the hub cache layout (blobs/ named by
their etag as the hub's are: the sha256 of a weights file, the git blob sha1 of config.json;
snapshots/<commit>/ links, refs/<revision>), chunk by chunk through `*.incomplete` files,
resuming any it finds - what the real client does on an interrupted download.

Env: HF_STANDIN_FILES (default 3), HF_STANDIN_FILE_MIB (default 4), HF_STANDIN_CHUNK_DELAY
(seconds per 1 MiB chunk, default 0.02), HF_STANDIN_FAIL_AFTER_MIB (exit 1 after writing that
many MiB in this run: an interruption), HF_STANDIN_GATED=1 (a gated repository: exit 1
without a token; not named *TOKEN*, which model_cache_download_environment refuses).
It never prints the token.
HF_STANDIN_RATE_MIB (MiB/s over the whole run, like a link of that speed; 0 = unlimited) and
HF_STANDIN_LOG (a file: one JSON line per run with the MiB it wrote, to prove a resume fetches
nothing twice).

The token is found the way huggingface_hub's get_token() finds it (utils/_auth.py and
constants.py of huggingface_hub 1.x): $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN, else the file
$HF_TOKEN_PATH (default $HF_HOME/token); a missing file is no token, an unreadable one is an
error (the real client's PermissionError: it reads the token for every request). Offline mode
is huggingface_hub's too: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set to 1/ON/YES/TRUE (any
case) refuses the download.

    hf_standin.py serve [--port N]      (STAND-IN for the hub's HTTP API, not the hub)

answers GET /api/models/<repo>/revision/<rev>[?blobs=true] with {"id", "sha", "siblings":
[{"rfilename", "size"}]} - what the hub's model_info answers - for the same fake model the
download writes. A branch is at sha1("<repo>@<branch>") unless HF_STANDIN_REFS names a JSON
file {"<repo>@<branch>": "<sha>"} that moves it (read on every request, so a test moves a
branch by rewriting the file); a 40-hex revision is its own sha. `download` uses the same
commit for the same revision.
"""

import argparse
import hashlib
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse

MIB = 1 << 20


def _clean(token) -> str:
    return (token or "").replace("\r", "").replace("\n", "").strip()


def _home() -> str:
    """huggingface_hub's constants.HF_HOME."""
    cache = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    default = os.path.join(cache, "huggingface")
    return os.path.expandvars(os.path.expanduser(os.environ.get("HF_HOME", default)))


def _token() -> str:
    """What huggingface_hub's get_token() returns ('' for None): the environment first, then
    the token file; PermissionError (an unreadable file) propagates, as in the real client."""
    env = _clean(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if env:
        return env
    path = os.environ.get("HF_TOKEN_PATH", os.path.join(_home(), "token"))
    try:
        with open(os.path.expandvars(os.path.expanduser(path)), encoding="utf-8") as handle:
            return _clean(handle.read())
    except FileNotFoundError:
        return ""


def _is_true(value) -> bool:
    """huggingface_hub's constants._is_true."""
    return value is not None and value.upper() in {"1", "ON", "YES", "TRUE"}


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
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    if args.command == "serve":
        server = hub_server(args.host, args.port)
        print(f"hub (STAND-IN test double) on http://{args.host}:{server.server_port}", flush=True)
        server.serve_forever()
        return 0

    print(
        "hf (STAND-IN test double): the hub is unreachable here; writing a fake model", flush=True
    )
    if _is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")):
        print("error: offline mode (HF_HUB_OFFLINE), cannot download", file=sys.stderr)
        return 1
    try:
        token = _token()
    except OSError as exc:  # the real client dies on it: its first request reads the token
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if os.environ.get("HF_STANDIN_GATED") == "1" and not token:
        print("401 Client Error: a token is required for this repository", file=sys.stderr)
        return 1
    home = _home()
    repo = os.path.join(home, "hub", "models--" + args.repo_id.replace("/", "--"))
    commit = commit_of(args.repo_id, args.revision)
    snapshot = os.path.join(repo, "snapshots", commit)
    for sub_dir in ("blobs", "refs", snapshot):
        os.makedirs(os.path.join(repo, sub_dir), exist_ok=True)

    count = int(os.environ.get("HF_STANDIN_FILES", "3"))
    size = int(os.environ.get("HF_STANDIN_FILE_MIB", "4"))
    delay = float(os.environ.get("HF_STANDIN_CHUNK_DELAY", "0.02"))
    fail_after = int(os.environ.get("HF_STANDIN_FAIL_AFTER_MIB", "0"))
    files = {"config.json": config_json(args.repo_id, commit)}
    for index in range(count):
        files[f"model-{index + 1:05d}-of-{count:05d}.safetensors"] = None
    print(f"Fetching {len(files)} files", flush=True)

    rate = float(os.environ.get("HF_STANDIN_RATE_MIB", "0")) * MIB
    started = time.monotonic()
    written = 0
    resumed = 0
    for name, content in files.items():
        total = len(content) if content is not None else size * MIB
        blob = os.path.join(repo, "blobs", etag(commit, name, content, total))
        if not os.path.exists(blob):
            partial = blob + ".incomplete"
            have = os.path.getsize(partial) if os.path.exists(partial) else 0
            if have:
                print(f"resuming {name} at {have // MIB} MiB", flush=True)
                resumed += have
            with open(partial, "ab") as out:
                while have < total:
                    chunk = (
                        content[have:]
                        if content is not None
                        else weights_chunk(commit, name, have // MIB)[have % MIB :]
                    )
                    chunk = chunk[: total - have]
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


def config_json(repo_id, commit):
    """The fake model's config.json (it names its commit, so each revision has its own blob)."""
    return json.dumps({"model_type": "standin", "repo": repo_id, "commit": commit}).encode()


def weights_chunk(commit, name, index):
    """MiB number `index` of a fake weights file: distinct per commit, file and MiB."""
    return hashlib.sha256(f"{commit}/{name}/{index}".encode()).digest() * (MIB // 32)


def etag(commit, name, content, total):
    """The blob's name, as the hub's etag is: the sha256 of an LFS file's content (the
    weights), the git blob sha1 of a regular git file (config.json, given as `content`)."""
    if content is not None:
        return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    digest = hashlib.sha256()
    for index in range((total + MIB - 1) // MIB):
        digest.update(weights_chunk(commit, name, index)[: total - index * MIB])
    return digest.hexdigest()


def commit_of(repo_id, revision):
    """The commit a revision is at: itself when a sha, a moved branch, else derived."""
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    refs_file = os.environ.get("HF_STANDIN_REFS")
    if refs_file and os.path.exists(refs_file):
        with open(refs_file) as handle:
            moved = json.load(handle).get(f"{repo_id}@{revision}")
        if moved:
            return moved
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


def model_info(repo_id, revision):
    """What the hub's /api/models/<repo>/revision/<rev>?blobs=true answers, for the fake model."""
    count = int(os.environ.get("HF_STANDIN_FILES", "3"))
    size = int(os.environ.get("HF_STANDIN_FILE_MIB", "4")) * MIB
    siblings = [{"rfilename": "config.json", "size": 64}] + [
        {"rfilename": f"model-{i + 1:05d}-of-{count:05d}.safetensors", "size": size}
        for i in range(count)
    ]
    return {"id": repo_id, "sha": commit_of(repo_id, revision), "siblings": siblings}


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = urllib.parse.urlparse(self.path).path
        match = re.fullmatch(r"/api/models/(.+)/revision/([^/]+)", path)
        if not match:
            self.send_error(404, "not a route of the hub stand-in")
            return
        body = json.dumps(model_info(match.group(1), urllib.parse.unquote(match.group(2)))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def hub_server(host="127.0.0.1", port=0):
    """The hub stand-in's HTTP server (not started); tests run serve_forever in a thread."""
    return http.server.ThreadingHTTPServer((host, port), _Hub)


def start_hub(host="127.0.0.1", port=0):
    """Start the hub stand-in in a daemon thread; returns the server (shutdown() stops it)."""
    server = hub_server(host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    sys.exit(main())
