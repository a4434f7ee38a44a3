"""The report a team reads: one Markdown file per run (runs/<ts>/report.md) and its plot.

Sections: the run, then per host the facts summary (gpuhost_gpu, gpuhost_host), the derived
settings and why (gpuhost_nccl reasons, the validated serving profile gpuhost_sglang), the
versions (gpuhost_python_env), verification (gpuhost_verify), the bench table, baseline
comparison and plot, and the findings. Only named fields are rendered, never a raw fact,
and the finished text goes through `Redactor`, so a token in the facts, the extra vars or
the environment never reaches the file or the terminal.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuhost import bench, findings, gpu_profile, rollout, timeline
from gpuhost.bench import markdown_table
from gpuhost.events import condensed_warnings
from gpuhost.redaction import REDACTED, is_secret_name
from gpuhost.runfacts import Run

PLOT_NAME = "bench.png"
# Values shorter than this are not scrubbed from the text: "1" or "true" would shred it.
_MIN_SECRET_LEN = 6


class Redactor:
    """Collects secret values (by key name, anywhere in the data) and blanks them in text."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()
        for name, value in os.environ.items():
            if is_secret_name(name):
                self.add(value)

    def add(self, value: object) -> None:
        if isinstance(value, str) and len(value) >= _MIN_SECRET_LEN and value != REDACTED:
            self.secrets.add(value)

    def scan(self, data: object) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                if is_secret_name(str(key)) and isinstance(value, str):
                    self.add(value)
                self.scan(value)
        elif isinstance(data, list):
            for item in data:
                self.scan(item)

    def __call__(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text


def _get(data: object, path: str, default: object = "unknown") -> object:
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return default
    return data


def cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value) or "-"
    text = " ".join(str(value).split())
    return text.replace("|", "\\|") if text else "-"


def _kv_table(pairs: list[tuple[str, object]]) -> str:
    return markdown_table(["", ""], [[k, cell(v)] for k, v in pairs])


def host_summary(gpu: dict, host: dict) -> list[tuple[str, object]]:
    gpus = gpu.get("gpus") or []
    names = sorted({g.get("name", "?") for g in gpus}) or [
        d.get("name", "?") for d in gpu.get("pci_devices") or []
    ]
    first = gpus[0] if gpus else {}
    driver = gpu.get("driver") or {}
    degraded = [f"GPU{g.get('index')}" for g in gpus if _get(g, "pcie.degraded", False) is True]
    return [
        ("GPUs", f"{gpu.get('count', 0)} x {', '.join(names) or 'none'}"),
        (
            "architecture / compute capability",
            f"{first.get('architecture', '-')} / {first.get('compute_capability', '-')}",
        ),
        (
            "memory per GPU",
            f"{first.get('memory_total_mib', '-')} MiB, BAR1 "
            f"{first.get('bar1_total_mib', '-')} MiB",
        ),
        (
            "driver",
            f"{driver.get('version', '-')} ({driver.get('module', '-')} module), "
            f"CUDA {driver.get('cuda_driver_version', '-')}",
        ),
        ("P2P", _get(gpu, "p2p.status")),
        ("worst GPU path", _get(gpu, "topology.worst_path")),
        (
            "PCIe",
            "degraded: " + ", ".join(degraded)
            if degraded
            else f"Gen{_get(first, 'pcie.gen_max', '?')} x{_get(first, 'pcie.width_max', '?')}",
        ),
        (
            "virtualisation",
            f"{_get(host, 'virt.type')} ({_get(host, 'virt.product_name')}), "
            f"passthrough: {cell(_get(host, 'virt.gpu_passthrough'))}",
        ),
        ("OS / kernel", f"{_get(host, 'os.pretty_name')} / {_get(host, 'kernel.release')}"),
        (
            "CPUs / memory / NUMA",
            f"{_get(host, 'cpu_count')} / "
            f"{_get(host, 'memory_total_mib')} MiB / {_get(host, 'numa_nodes')}",
        ),
        ("Secure Boot", _get(host, "secure_boot")),
    ]


def _section_settings(nccl: dict, sglang: dict) -> list[str]:
    out: list[str] = []
    if nccl:
        env = nccl.get("env") or {}
        out.append(
            f"NCCL ({nccl.get('topology_class', '?')} topology, NCCL "
            f"{nccl.get('nccl_version', '?')}): custom all-reduce "
            f"{'off' if nccl.get('disable_custom_all_reduce') else 'on'}.\n"
        )
        rows = [
            [
                str(r.get("variable")),
                cell(r.get("value")),
                cell(r.get("reason")),
                cell(r.get("source", "")),
            ]
            for r in nccl.get("reasons") or []
        ]
        if rows:
            out.append(markdown_table(["setting", "value", "why", "source"], rows))
        if env:
            shown = {k: (REDACTED if is_secret_name(k) else v) for k, v in sorted(env.items())}
            out.append("\nNCCL environment: " + " ".join(f"`{k}={v}`" for k, v in shown.items()))
        verify = nccl.get("verify") or {}
        if verify:
            out.append(
                f"\nNCCL check: {verify.get('status', '?')} - {cell(verify.get('message', ''))}"
            )
    if sglang:
        out.append(
            f"\nServing profile `{sglang.get('profile') or '(inline)'}` for sglang "
            f"{sglang.get('sglang_version', '?')}: {sglang.get('model')} as "
            f"`{sglang.get('served_model_name')}`, TP {sglang.get('tp_size')}, "
            f"listening on {sglang.get('host')}:{sglang.get('port')}, API key "
            f"{'required' if sglang.get('api_key_set') else 'not set'}.\n"
        )
        flags = sglang.get("flags") or {}
        if flags:
            out.append(
                markdown_table(
                    ["flag", "value"], [[f"`{k}`", cell(v)] for k, v in sorted(flags.items())]
                )
            )
        for label, key in (("Validation warnings", "warnings"), ("Validation notes", "notes")):
            if sglang.get(key):
                out.append(f"\n{label}:\n" + "\n".join(f"- {cell(x)}" for x in sglang[key]))
    if out:
        out[0] = out[0].lstrip("\n")
    return out or ["No derived settings recorded (run `gpuhost provision`)."]


def _section_versions(env: dict) -> str:
    """gpuhost_python_env: the installed stack (versions read from the venv) and its lock."""
    if env.get("enabled") is False:
        return "Role python_env is disabled on this host: no SGLang stack installed."
    pairs = [(k, v) for k, v in sorted((env.get("versions") or {}).items())]
    for key in ("python_version", "lane", "lock", "lock_sha256", "venv", "venv_path"):
        if env.get(key) and not isinstance(env[key], (dict, list)):
            pairs.append((key, env[key]))
    return _kv_table(pairs) if pairs else "No versions recorded (role python_env sets them)."


def _section_verify(verify: dict) -> list[str]:
    out = []
    server = verify.get("server") or {}
    if server.get("standin"):
        out.append("**The server checked is the STAND-IN (a test double, not SGLang).**\n")
    out.append(
        f"{verify.get('base_url', '?')}, model `{verify.get('served_model_name', '?')}`, "
        f"server version {server.get('version', '?')}, checked "
        f"{verify.get('checked_at', '?')}; time to first token: "
        f"{cell(verify.get('ttft_ms')) if verify.get('ttft_ms') is not None else '-'} ms.\n"
    )
    out.append(
        markdown_table(
            ["check", "status", "message"],
            [
                [
                    f.get("check", "?"),
                    str(f.get("status", "?")).upper(),
                    cell(f.get("message", "")),
                ]
                for f in verify.get("findings") or []
            ],
        )
    )
    questions = verify.get("questions") or []
    if questions:
        out.append(
            "\n"
            + markdown_table(
                ["question", "expected", "got", "result"],
                [
                    [
                        cell(q.get("prompt")),
                        cell(q.get("expected")),
                        cell(q.get("error") or q.get("got"))[:120],
                        "pass" if q.get("passed") else "FAIL",
                    ]
                    for q in questions
                ],
            )
        )
    return out


def bench_points(run: Run, host: str) -> list[bench.Point]:
    try:
        return bench.parse_lines(run.bench_lines.get(host) or [])
    except bench.BenchParseError:
        return []


def _section_bench(run: Run, host: str, threshold: float) -> list[str]:
    points = bench_points(run, host)
    if not points:
        return ["No bench results in this run (`gpuhost bench`)."]
    fact = run.facts.get(host, {}).get("gpuhost_bench") or {}
    out = [
        f"`sglang.bench_serving --backend sglang-oai --dataset-name random-ids`, "
        f"model {fact.get('model', '?')}, {points[0].input_len} in / {points[0].output_len} out "
        f"tokens, prompts per level: {', '.join(str(p.num_prompts) for p in points)}.\n",
        bench.points_table(points),
        *gpu_profile.section(run.bench_lines.get(host) or []),
    ]
    baseline = fact.get("baseline") or {}
    comparisons = bench.compare(points, baseline, threshold)
    if comparisons:
        out.append(
            f"\nAgainst the profile's baseline ({cell(baseline.get('source', ''))}); "
            f"more than {threshold:.0%} below is a regression:\n"
        )
        out.append(
            markdown_table(bench.COMPARISON_HEADER, [bench.comparison_row(c) for c in comparisons])
        )
    elif baseline:
        out.append("\nThe profile's baseline has no point at these lengths and levels.")
    else:
        out.append("\nNo baseline to compare with (the profile has no expected_baseline).")
    return out


# A validation note about what the GPU facts held names the fact it read (gpuhost_profile).
GPU_FACT_MARK = "(gpuhost_gpu)"


def gpu_notes(run: Run, host: str, notes: list) -> list:
    """The profile's validation notes, without a second GPU statement.

    The profile is validated in every run that resolves it, with that run's GPU facts; a
    verify or bench run reads none, so its notes say "no NVIDIA GPU visible (gpuhost_gpu)"
    while the host facts (read by an earlier run) list the GPUs. The host facts are the one
    GPU statement of the report; such a note is replaced by what it means: which run
    checked the profile without GPU facts, so the GPU checks did not run there.
    """
    gpu_source = run.source(host, "gpuhost_gpu")
    profile_source = run.source(host, "gpuhost_sglang")
    if not run.facts.get(host, {}).get("gpuhost_gpu") or gpu_source == profile_source:
        return notes  # one reading: the note and the host facts say the same
    kept = [n for n in notes if GPU_FACT_MARK not in str(n)]
    if len(kept) < len(notes):
        kept.append(
            f"the serving profile was checked in {run.source_text(profile_source)} without "
            "GPU facts, so its GPU-count and architecture checks did not run there; the GPUs "
            f"are those under Host facts ({run.source_text(gpu_source)})"
        )
    return kept


def _section_run(report: dict) -> list[str]:
    """What the run itself said: its warnings, the rollout (update, rollback) and, for a
    check-mode run, what would change per host (or why that is unknown)."""
    out: list[str] = []
    warnings = condensed_warnings(report.get("warnings") or [])
    if warnings:
        out += ["", "## Warnings", ""] + [f"- {cell(w)}" for w in warnings]
    section = report.get("rollout") or {}
    if section:
        rows = [
            [
                # A serving group is one unit of the rollout: its hosts are listed together.
                host + (f" (group {cell(row['group'])})" if row.get("group") else ""),
                str(row.get("state")),
                str(row.get("runs")),
                cell(row.get("config") or "-"),
                cell(row.get("previous") or "-"),
                cell(row.get("changed") or "-"),
                cell(row.get("message") or ""),
            ]
            for host, row in section.items()
        ]
        out += ["", "## Rollout", ""]
        out.append(
            markdown_table(
                ["host", "state", "runs config", "config", "before", "changed", "message"], rows
            )
        )
    if report.get("check") and report.get("hosts"):
        unknown = rollout.unknown_hosts(report)
        by_host: dict[str, list[str]] = {}
        for change in report.get("changed_tasks") or []:
            by_host.setdefault(change.get("host"), []).append(str(change.get("task")))
        out += ["", "## Would change (check mode)", ""]
        for host in sorted(report["hosts"]):
            tasks = by_host.get(host, [])
            if host in unknown:
                head = f"{len(tasks)} task(s) so far; the rest " if tasks else ""
                out.append(f"- {host}: {head}unknown: {cell(unknown[host])}")
            else:
                out.append(f"- {host}: " + (f"{len(tasks)} task(s)" if tasks else "nothing"))
            out += [f"  - {cell(t)}" for t in tasks]
    return out


def render(run: Run, threshold: float = bench.REGRESSION_THRESHOLD) -> str:
    """The Markdown report of a run; draws the plot beside report.md when there are points."""
    report = run.report
    redact = Redactor()
    redact.scan(report)
    redact.scan(run.facts)
    lines = [f"# gpuhost {report.get('command', '?')}: run {run.name}", ""]
    lines.append(
        _kv_table(
            [
                ("status", report.get("status")),
                (
                    "started / duration",
                    f"{report.get('started_at', '?')} / {report.get('duration_s', '?')} s",
                ),
                ("command line", " ".join(report.get("argv") or [])),
                ("inventory", report.get("inventory")),
                ("gpuhost", report.get("gpuhost_version")),
            ]
        )
    )
    if report.get("error"):
        lines += ["", f"Error: {cell(report['error'])}"]
    for task in report.get("failed_tasks") or []:
        lines += [
            "",
            f"Failed on {task.get('host')}: {task.get('task')}: {cell(task.get('message'))}",
        ]
    lines += _section_run(report)
    series = {}
    for host in run.hosts:
        facts = run.facts.get(host, {})
        borrowed = run.borrowed.get(host, {})
        note = ""
        if borrowed:
            note = (
                " (from earlier runs: "
                + ", ".join(
                    f"{k.removeprefix('gpuhost_')} of {v}"
                    + (f", {run.age(v)}" if run.age(v) else "")
                    for k, v in sorted(borrowed.items())
                )
                + ")"
            )
        lines += ["", f"## Host {host}", "", f"### Host facts{note}", ""]
        if facts.get("gpuhost_gpu") or facts.get("gpuhost_host"):
            lines.append(
                _kv_table(
                    host_summary(facts.get("gpuhost_gpu") or {}, facts.get("gpuhost_host") or {})
                )
            )
        else:
            lines.append("No host facts recorded (run `gpuhost check` or `gpuhost provision`).")
        lines += ["", "### Derived settings and why", ""]
        sglang = dict(facts.get("gpuhost_sglang") or {})
        if sglang.get("notes"):
            sglang["notes"] = gpu_notes(run, host, sglang["notes"])
        lines += _section_settings(facts.get("gpuhost_nccl") or {}, sglang)
        lines += ["", "### Versions", "", _section_versions(facts.get("gpuhost_python_env") or {})]
        lines += ["", "### Verification", ""]
        if host in (report.get("no_server") or []):
            lines.append(f"No server is installed on {host}: nothing was verified in this run.")
        elif facts.get("gpuhost_verify"):
            lines += _section_verify(facts["gpuhost_verify"])
        else:
            lines.append("Not verified in this run (`gpuhost verify`).")
        lines += ["", "### Benchmark", ""]
        lines += _section_bench(run, host, threshold)
        series[host] = bench_points(run, host)
        host_findings = findings.normalize(
            (report.get("findings") or {}).get(host) or facts.get("gpuhost_findings") or []
        )
        if host_findings:
            lines += [
                "",
                "### Findings",
                "",
                markdown_table(
                    ["status", "check", "message", "fix"],
                    [
                        [
                            f["status"].upper(),
                            f["check"],
                            cell(f["message"]),
                            cell(f["fix"]),
                        ]
                        for f in host_findings
                    ],
                ),
            ]
    if any(series.values()):
        baseline = next(
            (
                run.facts.get(h, {}).get("gpuhost_bench", {}).get("baseline")
                for h in run.hosts
                if run.facts.get(h, {}).get("gpuhost_bench")
            ),
            None,
        )
        bench.plot(series, run.path / PLOT_NAME, baseline)
        lines += ["", "## Plot", "", f"![throughput and latency against concurrency]({PLOT_NAME})"]
        gpu_series = {h: (series.get(h) or [], run.bench_lines.get(h) or []) for h in run.hosts}
        if gpu_profile.plot(gpu_series, run.path / gpu_profile.PLOT_NAME):
            lines += ["", f"![GPU samples under the throughput]({gpu_profile.PLOT_NAME})"]
    lines += timeline.markdown(report, run.path)
    return redact("\n".join(lines) + "\n")


def write(run: Run, threshold: float = bench.REGRESSION_THRESHOLD) -> Path:
    path = run.path / "report.md"
    path.write_text(render(run, threshold), encoding="utf-8")
    return path


def markdown_to_terminal(text: str) -> str:
    """report.md as plain text for a terminal: image links become their file names."""
    return re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", r"[plot: \2]", text)
