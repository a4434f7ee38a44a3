"""The bench's GPU and CPU samples in the report: what bounds each concurrency level, the CPU
side of each level, and a plot of the samples under the throughput.

Each bench line carries `gpu` (plugins/modules/sglang_bench.py: the level's nvidia-smi dmon
samples, their per-GPU summary and the verdict of gpuhost_gpu_samples.explain) and `cpu`
(gpuhost_cpu_samples: the server's threads and the guest's CPUs from /proc). This module
only renders what the line holds; the judgement was made, and tested, on the host side.
"""

from __future__ import annotations

from pathlib import Path

from gpuhost.bench import markdown_table

PLOT_NAME = "bench-gpu.png"
HEADER = ["concurrency", "bound by", "evidence (means over the level)", "what to look at"]
CPU_HEADER = ["concurrency", "busiest server thread", "server CPU", "CPU ms / output token",
              "steal", "run queue / CPUs"]  # fmt: skip


def levels(lines: list[dict]) -> list[tuple[int, dict]]:
    """(concurrency, gpu record) per level that has one, sorted; a later line wins."""
    by_level: dict[int, dict] = {}
    for line in lines or []:
        gpu = line.get("gpu") if isinstance(line, dict) else None
        level = line.get("max_concurrency") if isinstance(line, dict) else None
        if isinstance(gpu, dict) and isinstance(level, int):
            by_level[level] = gpu
    return sorted(by_level.items())


def cpu_levels(lines: list[dict]) -> list[tuple[int, dict]]:
    """(concurrency, cpu record) per level that has one, sorted; a later line wins."""
    by_level: dict[int, dict] = {}
    for line in lines or []:
        cpu = line.get("cpu") if isinstance(line, dict) else None
        level = line.get("max_concurrency") if isinstance(line, dict) else None
        if isinstance(cpu, dict) and isinstance(level, int):
            by_level[level] = cpu
    return sorted(by_level.items())


def _fmt(value, pattern: str) -> str:
    return "?" if value is None else pattern.format(value)


def cpu_rows(lines: list[dict]) -> list[list[str]]:
    """The CPU side per level: the busiest thread and its share of a core, the server's CPU
    (cores), CPU ms per output token, steal and the run queue against the CPU count."""
    out = []
    for level, cpu in cpu_levels(lines):
        summary = cpu.get("summary")
        if not isinstance(summary, dict):
            out.append([str(level), "not sampled: " + str(cpu.get("error") or "?"), "", "", "", ""])
            continue
        busiest = summary.get("busiest") or {}
        per_token = summary.get("cpu_s_per_token")
        out.append(
            [
                str(level),
                f"{busiest.get('comm', '?')} (tid {busiest.get('tid', '?')}) "
                + _fmt(busiest.get("share") and busiest["share"] * 100, "{:.0f}% of a core"),
                _fmt(summary.get("cores"), "{:.2f} cores"),
                _fmt(per_token and per_token * 1e3, "{:.3g}"),
                _fmt(summary.get("steal_pct"), "{:.1f}%"),
                _fmt(summary.get("run_queue"), "{:.1f}") + f" / {summary.get('cpus') or '?'}",
            ]
        )
    return out


def is_standin(lines: list[dict]) -> bool:
    return any(gpu.get("standin") for _, gpu in levels(lines))


def rows(lines: list[dict]) -> list[list[str]]:
    out = []
    for level, gpu in levels(lines):
        bound = gpu.get("bound") or {}
        if gpu.get("error") and not gpu.get("summary"):
            out.append([str(level), "not sampled", str(gpu["error"]), ""])
            continue
        out.append(
            [
                str(level),
                str(bound.get("bound", "unknown")).replace("_", " "),
                str(bound.get("evidence", "")),
                str(bound.get("advice", "")),
            ]
        )
    return out


def section(lines: list[dict]) -> list[str]:
    """Markdown lines for the report's bench part; [] when the run took no samples."""
    table = rows(lines)
    cpu_table = cpu_rows(lines)
    cpu_part = (
        [
            "\nThe CPU side of each level, from /proc (the server's process tree and the "
            "guest's CPUs; docs/slow-vm.md says how to read it):\n",
            markdown_table(CPU_HEADER, cpu_table),
        ]
        if cpu_table
        else []
    )
    if not table:
        return cpu_part
    intro = (
        "\nWhat bounds each level, from `nvidia-smi dmon` samples taken during it "
        "(busy = time a kernel ran, not SM activity; memory bandwidth = time HBM was read or "
        "written):\n"
    )
    if is_standin(lines):
        intro = (
            "\n**STAND-IN GPU samples** (made numbers from the test double, not a GPU; they "
            "show how the report reads, not this host):\n" + intro
        )
    return [intro, markdown_table(HEADER, table), *cpu_part]


def plot(series: dict[str, tuple[list, list[dict]]], path: Path) -> Path | None:
    """Output tok/s against concurrency on top and, under it, the level means of the GPU
    samples (busy, memory bandwidth, power of limit, PCIe of link, power-capped time), the
    bound resource written at each level. `series`: label -> (bench points, bench lines)."""
    # Only sampled levels: a level not sampled (sampler off or missing) has nothing to draw.
    drawn = {
        k: (p, lv)
        for k, (p, lines) in series.items()
        if (lv := [(n, g) for n, g in levels(lines) if g.get("summary")]) and p
    }
    if not drawn:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), dpi=100, sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    metrics = (
        ("sm", "busy %", "o-", 1.0),
        ("mem", "memory bandwidth %", "s-", 1.0),
        ("power_share", "power % of limit", "^-", 100.0),
        ("pcie_share", "PCIe % of link", "v-", 100.0),
        ("pviol", "power-capped % of time", "x:", 1.0),
    )
    standin = False
    for index, (label, (points, lv)) in enumerate(drawn.items()):
        colour = colours[index % len(colours)]
        top.plot(
            [p.concurrency for p in points],
            [p.output_tok_s for p in points],
            "o-",
            color=colour,
            label=f"{label} output tok/s",
        )
        xs = [level for level, _ in lv]
        for key, name, style, scale in metrics:
            ys = []
            for _, gpu in lv:
                summary = gpu.get("summary") or []
                values = [e.get(key) for e in summary if e.get(key) is not None]
                ys.append(max(values) * scale if values else float("nan"))
            bottom.plot(xs, ys, style, label=f"{label} {name}", alpha=0.8)
        cpu = [
            (n, c["summary"]["busiest"]["share"] * 100.0)
            for n, c in cpu_levels(series[label][1])
            if isinstance(c.get("summary"), dict)
            and (c["summary"].get("busiest") or {}).get("share")
        ]
        if cpu:
            bottom.plot(
                *zip(*cpu, strict=True), "D--", label=f"{label} busiest CPU thread % of a core"
            )
        for level, gpu in lv:
            standin = standin or bool(gpu.get("standin"))
            bound = (gpu.get("bound") or {}).get("bound", "")
            bottom.annotate(
                bound.replace("_", " "), (level, 103), ha="center", fontsize=7, rotation=20
            )
    top.set_ylabel("output tokens/s")
    top.set_title("Throughput" + (" (against the STAND-IN server)" if standin else ""))
    bottom.set_ylabel("% (busiest GPU / CPU thread, level mean)")
    bottom.set_ylim(0, 115)
    bottom.set_title(
        "GPU samples per level: STAND-IN (made numbers, not a GPU)"
        if standin
        else "GPU samples per level (nvidia-smi dmon) and the bound resource"
    )
    levels_all = sorted({lvl for _, lv in drawn.values() for lvl, _ in lv})
    for axis in (top, bottom):
        axis.set_xscale("log", base=2)
        axis.set_xticks(levels_all, [str(v) for v in levels_all])
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")
    bottom.set_xlabel("concurrency")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
