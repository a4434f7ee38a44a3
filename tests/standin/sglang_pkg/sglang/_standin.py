"""STAND-IN for `python -m sglang.launch_server`: a test double, not SGLang.

The server of the stand-in `sglang` package (tests/standin/sglang_pkg/README.md): the tests
install the package into the venv the unit runs, so `python -m sglang.launch_server` from that
venv runs this module, where a real host runs SGLang.

SGLang needs GPUs and model weights, which the test containers and the sandbox do not have.
This stdlib-only HTTP server speaks the part of SGLang's HTTP contract that gpuhost relies
on (docs/reference.md §3, sglang 0.5.x `srt/entrypoints/http_server.py`):

- the port stays closed while "loading" (weights, KV cache, CUDA graphs), then opens;
- `/health` and `/health_generate` answer 503 while warming up or draining, else 200;
  `/ping` is always 200 once the port is open;
- `/v1/models` lists the served model name; `/v1/chat/completions` and `/v1/completions`
  answer (simple arithmetic correctly, so a correctness query works; streaming too);
- `/server_info` (and the older `/get_server_info`) return the server args and a version,
  each key's value replaced by `<redacted>`: SGLang returns the keys there, and gpuhost's
  launcher scrubs them from SGLang's JSON responses (gpuhost-sglang-launch, ScrubSecrets, an
  ASGI layer); the stand-in is no ASGI app, so it carries that redaction itself;
- `--api-key` / `--admin-api-key`, decided as SGLang's `srt/utils/auth.py`
  (`decide_request_auth`, 0.5.10.post1 and 0.5.23) decides them: `/health*`, `/metrics` and
  `/ping` need no key; admin routes (ADMIN_OPTIONAL: cache flush, weights update, LoRA load,
  internal state setter, ...) need the admin key when one is set, else the client key; every other
  path needs the client key when one is set; a refusal is 401 `{"error": "Unauthorized"}`;
- SIGTERM: health goes 503, in-flight requests drain, then the process exits 0;
- like SGLang, it logs `server_args=...` (api_key and admin_api_key included) at start, so
  tests can prove that gpuhost's launcher keeps the keys out of the journal.

It accepts and ignores every other SGLang flag, so the unit's ExecStart is the same as for
the real server. It binds the `--host` it is given, as SGLang does: the tests give it a
non-loopback address only inside a container with a network namespace of its own (behind the
server's real port rule), never on the machine that runs them.

With `--revision`, the model must be in the hub cache under $HF_HOME (offline, as the unit runs
SGLang): a revision model_cache has not downloaded fails the start like SGLang does.

Fault modes (`--standin-fault` or env SGLANG_STANDIN_FAULT):
  none           behave (default)
  never-healthy  open the port, then answer 503 on /health forever
  crash-on-start exit 1 while "loading"
  wrong-answers  healthy, but every arithmetic answer is off by one
  slow-start     load for --standin-slow-seconds (default 600) before opening the port
  never-joins    a rank >= 1 loads, then never reaches rank 0 (as behind a port rule that
                 drops the dist-init port): its port stays closed, rank 0 times out
Timings: --standin-load-seconds (default 2), --standin-warmup-seconds (1),
--standin-token-delay (seconds per generated token, default 0.002).
CPU cost: --standin-cpu-us-per-token N (env SGLANG_STANDIN_CPU_US_PER_TOKEN, default 0 = none):
each generated token also costs N microseconds of CPU, spun in one thread named
`standin-sched` that serves every request in turn, as SGLang's scheduler does; with a cost
above what one core gives, that thread sits near 100% of a core and throughput stops at
1e6/N tokens/s, a "launch-bound" server for the bench's CPU sampler to find.

Several nodes (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`, as SGLang across hosts):
rank 0 listens at the dist-init address (torch.distributed's store, a plain TCP socket here) and
opens its HTTP port only once the N - 1 other ranks have joined; it gives up after
--standin-join-seconds (env SGLANG_STANDIN_JOIN_SECONDS, default 600) with torch's message
("Timed out after S seconds waiting for clients. J/N clients joined.") and exits 1. A rank >= 1
connects to rank 0 (retrying, as torch's store client does, within the same time), and once
the group is complete serves only what SGLang 0.5.10.post1's non-zero ranks serve
(`launch_dummy_health_check_server`): /ping, /health and /health_generate, 200 with an empty
body, everything else 404. A rank whose peer goes away exits 1, as an NCCL group does.

The nvidia-smi the bench samples with has its own double: tests/standin/nvidia_smi.py.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang import __version__ as VERSION

FAULTS = ("none", "never-healthy", "crash-on-start", "wrong-answers", "slow-start", "never-joins")
# SGLang's decide_request_auth lets these prefixes through with no key; /ping is the stand-in's.
UNAUTHENTICATED = ("/health", "/ready", "/metrics", "/ping")
# Routes SGLang 0.5.10.post1 marks @auth_level(AuthLevel.ADMIN_OPTIONAL) that the stand-in
# answers; the others of that list are unknown here (404 after the same auth decision).
ADMIN_ROUTES = (
    "/flush_cache",
    "/update_weights_from_disk",
    "/load_lora_adapter",
    "/unload_lora_adapter",
    "/set_internal_state",
)


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] [standin] {message}", flush=True)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    # allow_abbrev=False: SGLang's own parser would resolve prefixes, but the stand-in
    # must not silently take `--port-x` for `--port`; unknown flags are ignored instead.
    parser = argparse.ArgumentParser(prog="sglang_standin", allow_abbrev=False)
    parser.add_argument("--model-path", "--model", dest="model_path", default="standin/model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--admin-api-key", default=None)
    parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--revision", default=None)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr", default=None)
    parser.add_argument(
        "--standin-join-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_JOIN_SECONDS", "600")),
    )
    parser.add_argument(
        "--standin-fault",
        choices=FAULTS,
        default=os.environ.get("SGLANG_STANDIN_FAULT", "none") or "none",
    )
    parser.add_argument(
        "--standin-load-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_LOAD_SECONDS", "2")),
    )
    parser.add_argument(
        "--standin-warmup-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_WARMUP_SECONDS", "1")),
    )
    parser.add_argument(
        "--standin-slow-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_SLOW_SECONDS", "600")),
    )
    parser.add_argument(
        "--standin-token-delay",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_TOKEN_DELAY", "0.002")),
    )
    parser.add_argument(
        "--standin-cpu-us-per-token",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_CPU_US_PER_TOKEN", "0")),
    )
    args, ignored = parser.parse_known_args(argv)
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    return args, ignored


# "x" and the multiplication sign both mean times in a question.
TIMES = "x\u00d7"
ARITH = re.compile(r"(-?\d+)\s*([-+*/" + TIMES + r"])\s*(-?\d+)")


def answer(text: str, wrong: bool) -> str:
    """Answer simple arithmetic like a (very small) model; anything else gets a fixed line."""
    match = ARITH.search(text or "")
    if not match:
        return "This is the gpuhost SGLang stand-in; it only knows arithmetic."
    left, op, right = int(match.group(1)), match.group(2), int(match.group(3))
    if op == "+":
        value = left + right
    elif op == "-":
        value = left - right
    elif op == "*" or op in TIMES:
        value = left * right
    else:
        value = left // right if right else 0
    if wrong:
        value += 1
    return f"{left} {op} {right} = {value}. The answer is {value}."


class Scheduler:
    """The stand-in's "scheduler": one thread, named standin-sched (its comm in /proc), that
    spends the dialled CPU time per token for every request in turn."""

    NAME = "standin-sched"

    def __init__(self, us_per_token: float) -> None:
        self.cost = max(us_per_token, 0.0) / 1e6
        self.work: queue.Queue = queue.Queue()
        if self.cost:
            threading.Thread(target=self._run, name=self.NAME, daemon=True).start()

    def _run(self) -> None:
        try:  # the thread's name as /proc and top show it (Linux; 15 characters at most)
            with open("/proc/thread-self/comm", "w") as comm:
                comm.write(self.NAME)
        except OSError:
            pass
        while True:
            done = self.work.get()
            # CPU time, not wall time: a busy machine that preempts the thread does not
            # shorten the cost.
            end = time.thread_time() + self.cost
            while time.thread_time() < end:
                pass
            done.set()

    def token(self) -> None:
        """Block the request until the scheduler has spent one token's CPU time on it."""
        if self.cost:
            done = threading.Event()
            self.work.put(done)
            done.wait()


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ready_at = 0.0
        self.draining = False
        self.inflight = 0
        self.lock = threading.Lock()
        self.requests = 0
        self.scheduler = Scheduler(args.standin_cpu_us_per_token)

    def healthy(self) -> bool:
        if self.draining or self.args.standin_fault == "never-healthy":
            return False
        return time.monotonic() >= self.ready_at


class Handler(BaseHTTPRequestHandler):
    server_version = "sglang-standin/" + VERSION
    protocol_version = "HTTP/1.1"
    state: State  # set on the class before serving

    def log_message(self, format: str, *args) -> None:
        log("http " + (format % args))

    # -- helpers -------------------------------------------------------------------------
    def _send(self, code: int, body: object, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client left (a bench timing out, a drain): one log line, not a traceback.
            log(f"http client gone before the {code} answer to {self.path} was sent")
            self.close_connection = True

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return {}

    def _presented(self, expected: str) -> bool:
        """SGLang's _check_token: `Authorization: Bearer KEY` or `x-api-key: KEY`."""
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token, expected):
            return True
        header = self.headers.get("x-api-key", "")
        return bool(header) and hmac.compare_digest(header, expected)

    def _authorized(self) -> bool:
        """SGLang's decide_request_auth for NORMAL and ADMIN_OPTIONAL routes."""
        args = self.state.args
        path = self.path.split("?", 1)[0]
        if path.startswith(UNAUTHENTICATED):
            return True
        if path in ADMIN_ROUTES:
            if args.admin_api_key:
                return self._presented(args.admin_api_key)
            return self._presented(args.api_key) if args.api_key else True
        return self._presented(args.api_key) if args.api_key else True

    def _track(self, delta: int) -> None:
        with self.state.lock:
            self.state.inflight += delta
            if delta > 0:
                self.state.requests += 1

    # -- routes --------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._track(1)
        try:
            self._route_get(self.path.split("?", 1)[0])
        finally:
            self._track(-1)

    def do_POST(self) -> None:
        self._track(1)
        try:
            self._route_post(self.path.split("?", 1)[0])
        finally:
            self._track(-1)

    def _route_get(self, path: str) -> None:
        args = self.state.args
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
        elif path in ("/health", "/health_generate"):
            if self.state.healthy():
                self._send(200, b"", "text/plain")
            else:
                self._send(503, b"", "text/plain")
        elif path == "/ping":
            self._send(200, b"", "text/plain")
        elif path == "/v1/models":
            model = {
                "id": args.served_model_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": args.served_model_name,
                "max_model_len": 4096,
            }
            self._send(200, {"object": "list", "data": [model]})
        elif path in ("/server_info", "/get_server_info"):
            # SGLang returns its ServerArgs here, both keys included; gpuhost's launcher
            # redacts them (see the module docstring).
            info = {k: v for k, v in vars(args).items() if not k.startswith("standin_")}
            for name in ("api_key", "admin_api_key"):
                if info.get(name):
                    info[name] = "<redacted>"
            info.update(version=VERSION, standin=True, internal_states=[{}])
            self._send(200, info)
        elif path == "/get_model_info":
            self._send(
                200,
                {
                    "model_path": args.model_path,
                    "tokenizer_path": args.model_path,
                    "is_generation": True,
                },
            )
        elif path == "/metrics" and args.enable_metrics:
            text = (
                "# stand-in metrics\n"
                f"sglang:num_running_reqs {max(self.state.inflight - 1, 0)}\n"
                f"sglang:num_requests_total {self.state.requests}\n"
            )
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, {"detail": "Not Found"})

    def _route_post(self, path: str) -> None:
        # Read the body even when refusing: left unread, it would be parsed as the next
        # request on this keep-alive connection.
        body = self._body()
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
            return
        if path == "/v1/chat/completions":
            messages = body.get("messages") or []
            users = [m.get("content", "") for m in messages if m.get("role") == "user"]
            prompt = users[-1] if users else ""
            if isinstance(prompt, list):  # content parts
                prompt = " ".join(p.get("text", "") for p in prompt if isinstance(p, dict))
            self._complete(body, str(prompt), chat=True)
        elif path in ("/v1/completions", "/generate"):
            prompt = body.get("prompt", body.get("text", ""))
            if isinstance(prompt, list):
                prompt = " ".join(str(p) for p in prompt)
            self._complete(body, str(prompt), chat=False)
        elif path == "/flush_cache":
            self._send(200, b"Cache flushed.\n", "text/plain")
        elif path == "/update_weights_from_disk":
            self._send(200, {"success": True, "message": "stand-in: weights unchanged"})
        elif path in ("/load_lora_adapter", "/unload_lora_adapter"):
            self._send(200, {"success": True, "message": "stand-in: no adapters"})
        else:
            self._send(404, {"detail": "Not Found"})

    def _complete(self, body: dict, prompt: str, chat: bool) -> None:
        if not self.state.healthy():
            self._send(503, {"error": "server is not ready"})
            return
        args = self.state.args
        wrong = args.standin_fault == "wrong-answers"
        if ARITH.search(prompt):
            words = answer(prompt, wrong).split(" ")
        else:
            # A synthetic reply of the requested length, for load tests.
            words = ["tok"] * max(1, int(body.get("max_tokens") or 16))
        limit = int(body.get("max_tokens") or len(words))
        words = words[:limit] if limit > 0 else words
        rid = "standin-" + uuid.uuid4().hex[:12]
        kind = "chat.completion" if chat else "text_completion"
        usage = {
            "prompt_tokens": max(1, len(prompt.split())),
            "completion_tokens": len(words),
            "total_tokens": max(1, len(prompt.split())) + len(words),
        }
        if body.get("stream"):
            self._stream(rid, kind, words, usage, chat)
            return
        for _ in words:
            self.state.scheduler.token()
            time.sleep(args.standin_token_delay)
        text = " ".join(words)
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
        self._send(
            200,
            {
                "id": rid,
                "object": kind,
                "created": int(time.time()),
                "model": body.get("model", args.served_model_name),
                "choices": [choice],
                "usage": usage,
            },
        )

    def _stream(self, rid: str, kind: str, words: list[str], usage: dict, chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        model = self.state.args.served_model_name
        for index, word in enumerate(words):
            self.state.scheduler.token()
            time.sleep(self.state.args.standin_token_delay)
            piece = word if index == 0 else " " + word
            if chat:
                choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": piece, "finish_reason": None}
            chunk = {"id": rid, "object": kind + ".chunk", "model": model, "choices": [choice]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        final = {
            "id": rid,
            "object": kind + ".chunk",
            "model": model,
            "usage": usage,
            "choices": [
                {"index": 0, "delta": {} if chat else None, "text": "", "finish_reason": "stop"}
            ],
        }
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


def dist_init_address(value: str) -> tuple[str, int]:
    """HOST:PORT or [IPv6]:PORT, as SGLang's --dist-init-addr."""
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def watch(sock: socket.socket, what: str) -> None:
    """Exit 1 when the other end of a rank's connection goes away (an NCCL group breaks)."""

    def run() -> None:
        try:
            while sock.recv(64):
                pass
        except OSError:
            pass
        log(f"torch.distributed.DistNetworkError: {what} closed the connection; exiting 1")
        os._exit(1)

    threading.Thread(target=run, daemon=True, name="standin-peer").start()


def join_as_rank0(args: argparse.Namespace) -> list[socket.socket]:
    """Wait for ranks 1..N-1 at the dist-init address; the open connections, or exit 1."""
    host, port = dist_init_address(args.dist_init_addr)
    listener = socket.create_server(
        (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET
    )
    listener.settimeout(1.0)
    wanted = set(range(1, args.nnodes))
    joined: dict[int, socket.socket] = {}
    deadline = time.monotonic() + args.standin_join_seconds
    log(f"rank 0: waiting for ranks {sorted(wanted)} at {host}:{port}")
    last_said = time.monotonic()
    while set(joined) != wanted:
        if time.monotonic() > deadline:
            log(
                "torch.distributed.DistStoreError: Timed out after "
                f"{args.standin_join_seconds:.0f} seconds waiting for clients. "
                f"{len(joined) + 1}/{args.nnodes} clients joined."
            )
            sys.exit(1)
        if time.monotonic() - last_said > 5:
            log(f"rank 0: still waiting for ranks {sorted(wanted - set(joined))}")
            last_said = time.monotonic()
        try:
            conn, peer = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(5.0)
        try:
            hello = conn.makefile().readline().split()
        except OSError:
            conn.close()
            continue
        # "rank R nnodes N": a rank of another group size, or one already here, is refused.
        ok = len(hello) == 4 and hello[0] == "rank" and hello[2] == "nnodes"
        rank = int(hello[1]) if ok and hello[1].isdigit() else -1
        if not ok or hello[3] != str(args.nnodes) or rank not in wanted or rank in joined:
            log(f"rank 0: refused {peer[0]}: {' '.join(hello) or 'nothing'}")
            conn.close()
            continue
        log(f"rank 0: rank {rank} joined from {peer[0]}")
        joined[rank] = conn
    listener.close()
    for rank, conn in joined.items():
        conn.settimeout(None)
        conn.sendall(b"ready\n")
        watch(conn, f"rank {rank}")
    log(f"rank 0: all {args.nnodes} ranks joined")
    return list(joined.values())


def join_as_rank(args: argparse.Namespace) -> socket.socket:
    """Join rank 0 at the dist-init address and wait until the group is complete, or exit 1."""
    host, port = dist_init_address(args.dist_init_addr)
    deadline = time.monotonic() + args.standin_join_seconds
    log(f"rank {args.node_rank}: joining rank 0 at {host}:{port}")
    if args.standin_fault == "never-joins":
        # A connect whose SYN is dropped: torch's store client waits, nothing is said.
        while True:
            time.sleep(3600)
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5.0)
            conn.sendall(f"rank {args.node_rank} nnodes {args.nnodes}\n".encode())
            conn.settimeout(max(deadline - time.monotonic(), 1.0))
            if conn.makefile().readline().strip() == "ready":
                break
            conn.close()
        except OSError as exc:
            if time.monotonic() > deadline:
                log(
                    "torch.distributed.DistNetworkError: The client socket has timed out "
                    f"after {args.standin_join_seconds:.0f}s while trying to connect to "
                    f"({host}, {port}): {exc}"
                )
                sys.exit(1)
            time.sleep(1.0)
    conn.settimeout(None)
    log(f"rank {args.node_rank}: joined, all {args.nnodes} ranks up")
    watch(conn, "rank 0")
    return conn


class DummyHandler(BaseHTTPRequestHandler):
    """A rank >= 1's HTTP server: SGLang's launch_dummy_health_check_server."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:
        log("http " + (format % args))

    def do_GET(self) -> None:
        found = self.path.split("?", 1)[0] in ("/ping", "/health", "/health_generate")
        body = b"" if found else b'{"detail":"Not Found"}'
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


def missing_revision(args: argparse.Namespace) -> str:
    """Why a pinned revision cannot load offline, or "" when it can (or none is pinned).

    Like SGLang under HF_HUB_OFFLINE=1 (huggingface_hub's snapshot lookup): a hub model id
    with --revision loads only from $HF_HOME/hub/models--<org>--<name>/snapshots/<commit>/,
    the commit being the revision itself (a sha) or refs/<revision>. Without --revision the
    stand-in loads no weights at all (scenarios that skip model_cache); that is its one
    leniency, and only there.
    """
    if not args.revision or args.model_path.startswith("/"):
        return ""
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    repo = os.path.join(home, "hub", "models--" + args.model_path.replace("/", "--"))
    commit = args.revision
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        try:
            with open(os.path.join(repo, "refs", commit)) as ref:
                commit = ref.read().strip()
        except OSError:
            commit = ""
    config = os.path.join(repo, "snapshots", commit, "config.json") if commit else ""
    if config and os.path.isfile(config):
        log(f"Loading {args.model_path}@{args.revision} from {os.path.dirname(config)}")
        return ""
    return (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        f"snapshot folder for {args.model_path}@{args.revision} on the local disk and outgoing "
        "traffic has been disabled (HF_HUB_OFFLINE=1)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, ignored = parse_args(argv)
    log("STAND-IN for sglang.launch_server (gpuhost test double, not SGLang)")
    # The same startup line SGLang prints (both keys included, as SGLang does).
    shown = {k: v for k, v in vars(args).items() if not k.startswith("standin_")}
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")")
    if ignored:
        log("accepted and ignored SGLang flags: " + " ".join(ignored))
    host = args.host

    missing = missing_revision(args)
    if missing:
        log(missing)
        return 1

    load = args.standin_load_seconds
    if args.standin_fault == "slow-start":
        load = args.standin_slow_seconds
    steps = 5
    for step in range(1, steps + 1):
        time.sleep(load / steps)
        if args.standin_fault == "crash-on-start" and step == 2:
            log("fault crash-on-start: RuntimeError: stand-in crashed while loading weights")
            return 1
        log(f"Loading safetensors checkpoint shards: {step * 100 // steps}% ({step}/{steps})")

    if args.nnodes > 1:
        if not args.dist_init_addr or not 0 <= args.node_rank < args.nnodes:
            log(
                f"--nnodes {args.nnodes} needs --dist-init-addr and a --node-rank "
                f"0..{args.nnodes - 1}"
            )
            return 1
        if args.node_rank > 0:
            join_as_rank(args)
            dummy = ThreadingHTTPServer((host, args.port), DummyHandler)
            dummy.daemon_threads = True
            signal.signal(
                signal.SIGTERM, lambda *_: threading.Thread(target=dummy.shutdown).start()
            )
            log(f"rank {args.node_rank}: dummy health server on http://{host}:{args.port}")
            dummy.serve_forever(poll_interval=0.2)
            log("stopped; exiting 0")
            return 0
        join_as_rank0(args)

    state = State(args)
    Handler.state = state
    server = ThreadingHTTPServer((host, args.port), Handler)
    server.daemon_threads = True
    state.ready_at = time.monotonic() + args.standin_warmup_seconds

    def drain(signum, _frame):
        if state.draining:
            return
        state.draining = True
        log(f"received signal {signum}: /health answers 503, draining in-flight requests")

        def finish():
            while True:
                with state.lock:
                    if state.inflight == 0:
                        break
                time.sleep(0.05)
            server.shutdown()

        threading.Thread(target=finish, daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    log(f"The server is fired up and ready to roll! (stand-in on http://{host}:{args.port})")
    if args.standin_fault != "none":
        log(f"fault mode: {args.standin_fault}")
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    log("drained; exiting 0")
    return 0
