# Copyright: gpuhost contributors
# Apache-2.0
"""Build the `python -m sglang.bench_serving` command and clean its JSON line (role verify).

bench_serving (sglang 0.5.x, docs/reference.md §3) appends one JSON object per run to
--output-file. That object embeds the server's /server_info, and SGLang's /server_info holds
`api_key`: every line is scrubbed here before it leaves the host. `request_rate` is
Infinity for an unpaced run, which strict JSON readers refuse: non-finite numbers become
strings.
"""

from __future__ import annotations

import math

from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_secrets import redact

# Of the embedded /server_info only these survive: enough to say what was measured.
SERVER_INFO_KEEP = (
    "version",
    "model_path",
    "served_model_name",
    "tp_size",
    "attention_backend",
    "moe_runner_backend",
    "kv_cache_dtype",
    "quantization",
    "max_running_requests",
    "disable_custom_all_reduce",
    "standin",
)
# What a line must carry to be a result; bench_serving writes no metrics when it failed.
REQUIRED = (
    "output_throughput",
    "total_throughput",
    "median_ttft_ms",
    "median_itl_ms",
    "mean_e2e_latency_ms",
)


def command(python, p):
    """argv for one concurrency level; `p` holds the module's parameters."""
    argv = [
        python,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang-oai",
        # plain `random` downloads ShareGPT; random-ids needs only the tokenizer.
        "--dataset-name",
        "random-ids",
        "--host",
        p["host"],
        "--port",
        str(p["port"]),
        "--model",
        p["model"],
        "--random-input-len",
        str(p["input_len"]),
        "--random-output-len",
        str(p["output_len"]),
        "--random-range-ratio",
        str(p["range_ratio"]),
        "--num-prompts",
        str(p["num_prompts"]),
        "--max-concurrency",
        str(p["concurrency"]),
        "--seed",
        str(p["seed"]),
        "--output-file",
        p["output_file"],
    ]
    if p.get("served_model_name"):
        argv += ["--served-model-name", p["served_model_name"]]
    if p.get("tokenizer"):
        argv += ["--tokenizer", p["tokenizer"]]
    return argv + [str(a) for a in p.get("extra_args") or []]


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def scrub(line):
    """One bench_serving result, safe to record: server_info trimmed, secrets gone."""
    clean = {k: v for k, v in line.items() if k != "server_info"}
    info = line.get("server_info")
    if isinstance(info, dict):
        clean["server_info"] = {k: info[k] for k in SERVER_INFO_KEEP if k in info}
    return _finite(redact(clean))


def missing_metrics(line):
    return [k for k in REQUIRED if not isinstance(line.get(k), (int, float))]


def last_line(text):
    """The newest JSON object of an --output-file (it appends)."""
    import json

    for raw in reversed(text.strip().splitlines()):
        raw = raw.strip()
        if raw.startswith("{"):
            return json.loads(raw)
    raise ValueError("bench_serving wrote no JSON line")
