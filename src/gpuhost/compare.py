"""`gpuhost report --compare RUN_A RUN_B`: two runs side by side in one Markdown file.

Host facts and settings that differ, verification, and the bench levels as "A / B" with the
change in output throughput; one plot with both runs. The same Redactor as report.md.
"""

from __future__ import annotations

from pathlib import Path

from gpuhost import bench
from gpuhost.bench import markdown_table
from gpuhost.report import Redactor, bench_points, cell, host_summary
from gpuhost.runfacts import Run


def _label(run: Run) -> str:
    return f"{run.name} ({run.report.get('command', '?')})"


def _lengths(pairs: set[tuple[int, int]]) -> str:
    return ", ".join(f"{i}/{o}" for i, o in sorted(pairs)) or "-"


def _pair(a: bench.Point | None, b: bench.Point | None, key: str, fmt: str) -> str:
    return " / ".join(fmt.format(getattr(p, key)) if p else "-" for p in (a, b))


def render_compare(a: Run, b: Run, out_dir: Path) -> str:
    """Two runs side by side: facts that differ, verification, and bench per host."""
    redact = Redactor()
    for run in (a, b):
        redact.scan(run.report)
        redact.scan(run.facts)
    lines = [f"# gpuhost compare: {a.name} vs {b.name}", ""]
    lines.append(
        markdown_table(
            ["", "A", "B"],
            [
                ["run", _label(a), _label(b)],
                ["status", cell(a.report.get("status")), cell(b.report.get("status"))],
                ["started", cell(a.report.get("started_at")), cell(b.report.get("started_at"))],
            ],
        )
    )
    series: dict[str, list[bench.Point]] = {}
    for host in sorted(set(a.hosts) | set(b.hosts)):
        fa, fb = a.facts.get(host, {}), b.facts.get(host, {})
        lines += ["", f"## Host {host}", "", "### Host facts and settings", ""]
        rows = []
        if any(f.get(k) for f in (fa, fb) for k in ("gpuhost_gpu", "gpuhost_host")):
            pairs = zip(
                host_summary(fa.get("gpuhost_gpu") or {}, fa.get("gpuhost_host") or {}),
                host_summary(fb.get("gpuhost_gpu") or {}, fb.get("gpuhost_host") or {}),
                strict=True,
            )
            rows += [[ka, cell(va), cell(vb)] for (ka, va), (_, vb) in pairs]
        else:
            rows.append(["host facts", "not recorded", "not recorded"])
        env_a = (fa.get("gpuhost_nccl") or {}).get("env") or {}
        env_b = (fb.get("gpuhost_nccl") or {}).get("env") or {}
        rows.append(
            [
                "NCCL env",
                cell([f"{k}={v}" for k, v in sorted(env_a.items())]),
                cell([f"{k}={v}" for k, v in sorted(env_b.items())]),
            ]
        )
        flags_a = (fa.get("gpuhost_sglang") or {}).get("flags") or {}
        flags_b = (fb.get("gpuhost_sglang") or {}).get("flags") or {}
        for flag in sorted(set(flags_a) | set(flags_b)):
            if flags_a.get(flag) != flags_b.get(flag):
                rows.append(
                    [f"`{flag}`", cell(flags_a.get(flag, "-")), cell(flags_b.get(flag, "-"))]
                )
        lines.append(markdown_table(["", "A", "B"], rows))
        va, vb = fa.get("gpuhost_verify") or {}, fb.get("gpuhost_verify") or {}
        lines += [
            "",
            "### Verification",
            "",
            markdown_table(
                ["", "A", "B"],
                [
                    ["passed", cell(va.get("passed", "-")), cell(vb.get("passed", "-"))],
                    ["TTFT ms", cell(va.get("ttft_ms", "-")), cell(vb.get("ttft_ms", "-"))],
                ],
            ),
        ]
        pa, pb = bench_points(a, host), bench_points(b, host)
        lines += ["", "### Benchmark (A / B)", ""]
        lengths_a = {(p.input_len, p.output_len) for p in pa}
        lengths_b = {(p.input_len, p.output_len) for p in pb}
        same_lengths = lengths_a == lengths_b
        if pa and pb and not same_lengths:
            lines.append(
                f"Different prompt/answer lengths (A {_lengths(lengths_a)}, B "
                f"{_lengths(lengths_b)}): the levels are shown side by side, not compared.\n"
            )
        if pa or pb:
            by_level = {p.concurrency: [p, None] for p in pa}
            for p in pb:
                by_level.setdefault(p.concurrency, [None, None])[1] = p
            rows = []
            for level in sorted(by_level):
                x, y = by_level[level]
                rows.append(
                    [str(level)]
                    + [_pair(x, y, key, fmt) for key, _, fmt in bench.COLUMNS[1:]]
                    + [
                        f"{(y.output_tok_s - x.output_tok_s) / x.output_tok_s * 100:+.1f}%"
                        if x and y and x.output_tok_s and same_lengths
                        else "-"
                    ]
                )
            lines.append(
                markdown_table(
                    ["concurrency", *[t for _, t, _ in bench.COLUMNS[1:]], "output B vs A"], rows
                )
            )
            series[f"A {host}"], series[f"B {host}"] = pa, pb
        else:
            lines.append("Neither run has bench results for this host.")
    if any(series.values()):
        name = f"compare-{a.name}-{b.name}.png"
        bench.plot(series, out_dir / name)
        lines += ["", "## Plot", "", f"![A and B against concurrency]({name})"]
    return redact("\n".join(lines) + "\n")
