#!/usr/bin/python
# Copyright: gpuhost contributors
# Apache-2.0
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Run one sglang.bench_serving level against the local server
description:
  - Runs C(python -m sglang.bench_serving --backend sglang-oai --dataset-name random-ids)
    from the host's venv for one concurrency level and returns its JSON line.
  - The line is scrubbed first, because bench_serving embeds the server's C(/server_info),
    which holds the API key. The key itself reaches bench_serving only through its
    environment (C(OPENAI_API_KEY)), never through argv.
  - Generates load, changes nothing on the host; skipped in check mode.
options:
  python:
    description: Interpreter of the venv that has sglang.
    type: path
    required: true
  host:
    description: Server address.
    type: str
    default: 127.0.0.1
  port:
    description: Server port.
    type: int
    default: 30000
  model:
    description: Hugging Face id of the model (bench_serving loads its tokenizer from it).
    type: str
    required: true
  served_model_name:
    description: Name requests carry; empty uses C(model).
    type: str
    default: ""
  tokenizer:
    description: Tokenizer path or id when it is not C(model)'s.
    type: str
    default: ""
  api_key:
    description: Bearer key of the server.
    type: str
    default: ""
  concurrency:
    description: C(--max-concurrency).
    type: int
    required: true
  num_prompts:
    description: C(--num-prompts).
    type: int
    required: true
  input_len:
    description: C(--random-input-len).
    type: int
    default: 256
  output_len:
    description: C(--random-output-len).
    type: int
    default: 256
  range_ratio:
    description: C(--random-range-ratio); 1.0 makes every prompt exactly the lengths above.
    type: float
    default: 1.0
  seed:
    description: C(--seed), so two runs send the same prompts.
    type: int
    default: 1
  environment:
    description: Extra environment (HF_HOME, HF_HUB_OFFLINE ...).
    type: dict
    default: {}
  extra_args:
    description: More bench_serving arguments.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds this level may run before it is killed.
    type: int
    default: 3600
  gpu_sampler:
    description:
      - nvidia-smi (argv) that samples the GPUs during the level (C(dmon -s pucvmet -o T -d 1))
        and reads their limits once; the samples, their summary and the resource that bounds
        the level are returned in C(result.gpu). [] samples nothing.
      - Without the tool the level still runs and C(result.gpu.error) says why.
    type: list
    elements: str
    default: [nvidia-smi]
  cpu_sampler:
    description:
      - Read the server's process tree and the CPUs from /proc during the level (CPU seconds
        per output token, the busiest thread's share of a core, steal, run queue); returned
        in C(result.cpu) and used by the verdict in C(result.gpu.bound), which then tells
        C(cpu_launch) and C(interconnect) apart from C(latency).
      - The server is C(server_unit)'s MainPID, else the process listening on C(port) that
        this account can see.
    type: bool
    default: true
  server_unit:
    description: systemd unit of the server (C(name.service)); empty finds it by its port.
    type: str
    default: ""
author:
  - gpuhost contributors
"""

EXAMPLES = r"""
- name: Benchmark at concurrency 8
  gpuhost.gpu.sglang_bench:
    python: /opt/gpuhost/venv/bin/python
    model: lukealonso/GLM-5-NVFP4
    served_model_name: glm-5
    concurrency: 8
    num_prompts: 32
"""

RETURN = r"""
result:
  description: >-
    The scrubbed bench_serving JSON line (output_throughput, median_ttft_ms, ...), with
    C(gpu): the GPU samples of the level (C(source), C(standin), C(limits), C(summary),
    C(bound), C(samples)), and C(cpu): the CPU side of the level (C(source), C(error),
    C(summary)).
  returned: success
  type: dict
cmd:
  description: The command that ran (no secret is ever on it).
  returned: always
  type: list
"""


from ansible.module_utils.basic import AnsibleModule  # noqa: E402 - after the doc blocks
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_bench_serving import (  # noqa: E402
    command,
    last_line,
    missing_metrics,
    scrub,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_cpu_samples import (  # noqa: E402
    UNIT,
    CpuSampler,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_gpu_samples import (  # noqa: E402
    LIMITS_QUERY,
    compact,
    explain,
    parse_dmon,
    parse_limits,
    summarize,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_listen import SERVER_PORT  # noqa: E402 - after the doc blocks


class Sampler:
    """`nvidia-smi dmon` in the background of one level, its output in a file (a pipe could
    fill and stall it); stop() parses it. Never fails the level: a missing or broken tool
    becomes `error` in the record."""

    def __init__(self, prefix, workdir):
        self.prefix = [str(a) for a in prefix or []]
        self.path = os.path.join(workdir, "dmon.txt")
        self.proc = None
        self.handle = None
        self.limits = {}
        self.error = ""
        self.summary = []

    def start(self):
        if not self.prefix:
            self.error = "GPU sampling off (gpu_sampler: [])"
            return
        if shutil.which(self.prefix[0]) is None:
            self.error = f"{self.prefix[0]} not found: no GPU samples"
            return
        try:
            query = subprocess.run(
                [*self.prefix, f"--query-gpu={LIMITS_QUERY}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            self.limits = parse_limits(query.stdout) if query.returncode == 0 else {}
            self.handle = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - stop() closes it
            self.proc = subprocess.Popen(
                [*self.prefix, "dmon", "-s", "pucvmet", "-o", "T", "-d", "1"],
                stdout=self.handle,
                stderr=subprocess.STDOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error = f"GPU sampler did not start: {exc}"

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.handle is not None:
            self.handle.close()
        text = ""
        if self.proc is not None:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        parsed = parse_dmon(text)
        if self.proc is not None and not parsed["samples"] and not self.error:
            self.error = "the GPU sampler printed no samples: " + text.strip()[-200:]
        summary = summarize(parsed["samples"], self.limits)
        self.summary = summary
        return {
            "source": " ".join([*self.prefix, "dmon -s pucvmet -o T -d 1"]) if self.prefix else "",
            "standin": parsed["standin"],
            "error": self.error,
            "limits": {str(k): v for k, v in self.limits.items()},
            "summary": summary,
            "bound": explain(summary),
            "samples": compact(parsed["samples"]),
        }


def tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "default": SERVER_PORT},
            "model": {"type": "str", "required": True},
            "served_model_name": {"type": "str", "default": ""},
            "tokenizer": {"type": "str", "default": ""},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "concurrency": {"type": "int", "required": True},
            "num_prompts": {"type": "int", "required": True},
            "input_len": {"type": "int", "default": 256},
            "output_len": {"type": "int", "default": 256},
            "range_ratio": {"type": "float", "default": 1.0},
            "seed": {"type": "int", "default": 1},
            "environment": {"type": "dict", "default": {}},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 3600},
            "gpu_sampler": {"type": "list", "elements": "str", "default": ["nvidia-smi"]},
            "cpu_sampler": {"type": "bool", "default": True},
            "server_unit": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = dict(module.params)
    if p["concurrency"] < 1 or p["num_prompts"] < 1:
        module.fail_json(msg="concurrency and num_prompts must be >= 1")
    if p["server_unit"] and not UNIT.match(p["server_unit"]):
        module.fail_json(
            msg=f"server_unit {p['server_unit']!r} is no systemd service name "
            "(letters, digits, @_.:- ending in .service)"
        )
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no load generated")
    if not os.access(p["python"], os.X_OK):
        module.fail_json(msg=f"{p['python']} is not an executable Python: run the python_env role")

    workdir = tempfile.mkdtemp(prefix="gpuhost-bench-")
    p["output_file"] = os.path.join(workdir, "bench.jsonl")
    argv = command(p["python"], p)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in p["environment"].items()})
    env.pop("OPENAI_API_KEY", None)
    if p["api_key"]:
        env["OPENAI_API_KEY"] = p["api_key"]
    sampler = Sampler(p["gpu_sampler"], workdir)
    cpu_sampler = CpuSampler(p["port"], p["server_unit"]) if p["cpu_sampler"] else None
    try:
        sampler.start()
        if cpu_sampler:
            cpu_sampler.start()
        # cwd: bench_serving may drop files beside it; the temp dir keeps the host clean.
        try:
            proc = subprocess.run(
                argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=p["timeout"]
            )
        finally:
            gpu = sampler.stop()
            if cpu_sampler:
                cpu_sampler.stop()
        try:
            with open(p["output_file"], encoding="utf-8") as handle:
                raw = handle.read()
        except OSError:
            raw = ""
    except subprocess.TimeoutExpired:
        module.fail_json(
            msg=f"bench_serving at concurrency {p['concurrency']} ran over {p['timeout']} s",
            cmd=argv,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    out = tail(proc.stdout) + ("\n" + tail(proc.stderr, 5) if proc.stderr.strip() else "")
    if p["api_key"]:
        out = out.replace(p["api_key"], "********")
    if proc.returncode != 0 or not raw.strip():
        module.fail_json(
            msg=f"bench_serving at concurrency {p['concurrency']} failed (rc={proc.returncode})",
            cmd=argv,
            output_tail=out,
        )
    try:
        line = last_line(raw)
    except ValueError as exc:
        module.fail_json(msg=str(exc), cmd=argv, output_tail=out)
    missing = missing_metrics(line)
    if missing:
        module.fail_json(
            msg=f"bench_serving wrote no {', '.join(missing)}: every request failed?",
            cmd=argv,
            output_tail=out,
        )
    result = scrub(line)
    result["num_prompts"] = p["num_prompts"]
    cpu = {"source": "", "error": "CPU sampling off (cpu_sampler: false)", "summary": None}
    if cpu_sampler:
        cpu = cpu_sampler.record(result.get("total_output_tokens"))
        gpu["bound"] = explain(sampler.summary, cpu["summary"])
    result["gpu"] = gpu
    result["cpu"] = cpu
    # json round trip: the result holds only plain types before it leaves the host.
    module.exit_json(changed=False, result=json.loads(json.dumps(result)), cmd=argv)


if __name__ == "__main__":
    main()
