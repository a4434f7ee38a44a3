"""sglang.bench_serving results: parse the JSON lines, compare with a baseline, tabulate, plot.

A JSON line is what `python -m sglang.bench_serving --output-file` appends per run (sglang
0.5.x, docs/reference.md §3): `max_concurrency`, `random_input_len`,
`random_output_len`, `output_throughput`, `total_throughput`, `median_ttft_ms`,
`median_itl_ms`, `mean_e2e_latency_ms`, ... A baseline is a profile's `expected_baseline`:
points of {concurrency, input_len, output_len, output_tok_s}.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

# A point more than this far below its baseline is a regression (the 10%).
REGRESSION_THRESHOLD = 0.10

COLUMNS = (
    ("concurrency", "concurrency", "{:d}"),
    ("output_tok_s", "output tok/s", "{:.1f}"),
    ("total_tok_s", "total tok/s", "{:.1f}"),
    ("median_ttft_ms", "median TTFT ms", "{:.1f}"),
    ("median_itl_ms", "median ITL ms", "{:.1f}"),
    ("mean_e2e_s", "mean E2E s", "{:.2f}"),
)


@dataclass(frozen=True)
class Point:
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int
    completed: int
    output_tok_s: float
    total_tok_s: float
    median_ttft_ms: float
    median_itl_ms: float
    mean_e2e_s: float
    duration_s: float

    def row(self) -> list[str]:
        return [fmt.format(getattr(self, key)) for key, _, fmt in COLUMNS]


@dataclass(frozen=True)
class Comparison:
    concurrency: int
    input_len: int
    output_len: int
    expected: float
    measured: float
    delta: float  # (measured - expected) / expected
    regression: bool
    expected_range: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class BenchParseError(ValueError):
    pass


def _number(line: dict, key: str) -> float:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BenchParseError(f"bench_serving line has no number for {key!r}: {value!r}")
    return float(value)


def _int(line: dict, key: str, default: int = 0) -> int:
    value = line.get(key)
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


def parse_line(line: dict) -> Point:
    """One bench_serving JSON object as a Point; a line without metrics is an error."""
    if not isinstance(line, dict):
        raise BenchParseError(f"not a JSON object: {line!r}"[:200])
    concurrency = line.get("max_concurrency")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise BenchParseError(f"bench_serving line without max_concurrency: {concurrency!r}")
    return Point(
        concurrency=concurrency,
        input_len=_int(line, "random_input_len"),
        output_len=_int(line, "random_output_len"),
        num_prompts=_int(line, "num_prompts", _int(line, "completed")),
        completed=_int(line, "completed"),
        output_tok_s=_number(line, "output_throughput"),
        total_tok_s=_number(line, "total_throughput"),
        median_ttft_ms=_number(line, "median_ttft_ms"),
        median_itl_ms=_number(line, "median_itl_ms"),
        mean_e2e_s=_number(line, "mean_e2e_latency_ms") / 1000.0,
        duration_s=float(line["duration"])
        if isinstance(line.get("duration"), (int, float))
        else 0.0,
    )


def parse_lines(lines: list[dict]) -> list[Point]:
    """Points sorted by (lengths, concurrency); a later line for the same level wins."""
    points: dict[tuple[int, int, int], Point] = {}
    for line in lines:
        point = parse_line(line)
        points[(point.input_len, point.output_len, point.concurrency)] = point
    return [points[key] for key in sorted(points)]


def compare(
    points: list[Point], baseline: dict | None, threshold: float = REGRESSION_THRESHOLD
) -> list[Comparison]:
    """Each measured point that has a baseline point with the same concurrency and lengths.

    Output tok/s is the compared number (it is what the profiles record). A point is a
    regression when it is more than `threshold` below the baseline's output_tok_s.
    """
    expected_points = (baseline or {}).get("points") or []
    out = []
    for point in points:
        for ref in expected_points:
            if not isinstance(ref, dict) or not isinstance(ref.get("output_tok_s"), (int, float)):
                continue
            if (
                int(ref.get("concurrency", -1)) == point.concurrency
                and int(ref.get("input_len", point.input_len)) == point.input_len
                and int(ref.get("output_len", point.output_len)) == point.output_len
            ):
                expected = float(ref["output_tok_s"])
                delta = (point.output_tok_s - expected) / expected if expected else 0.0
                low, high = ref.get("output_tok_s_min"), ref.get("output_tok_s_max")
                out.append(
                    Comparison(
                        concurrency=point.concurrency,
                        input_len=point.input_len,
                        output_len=point.output_len,
                        expected=expected,
                        measured=point.output_tok_s,
                        delta=delta,
                        regression=delta < -threshold,
                        expected_range=(float(low), float(high))
                        if isinstance(low, (int, float)) and isinstance(high, (int, float))
                        else None,
                    )
                )
                break
    return out


def comparison_row(c: Comparison) -> list[str]:
    expected = f"{c.expected:.1f}"
    if c.expected_range:
        expected += f" ({c.expected_range[0]:.0f}-{c.expected_range[1]:.0f})"
    verdict = "REGRESSION" if c.regression else "ok"
    return [
        str(c.concurrency),
        f"{c.input_len}/{c.output_len}",
        expected,
        f"{c.measured:.1f}",
        f"{c.delta * 100:+.1f}%",
        verdict,
    ]


COMPARISON_HEADER = [
    "concurrency",
    "in/out",
    "expected tok/s",
    "measured tok/s",
    "delta",
    "verdict",
]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def points_table(points: list[Point]) -> str:
    return markdown_table([title for _, title, _ in COLUMNS], [p.row() for p in points])


def plot(series: dict[str, list[Point]], path: Path, baseline: dict | None = None) -> Path:
    """PNG of throughput (left) and latency (right) against concurrency, one colour per
    series (a host, or a run in a comparison); baseline points as black crosses."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    levels: set[int] = set()
    for index, (label, points) in enumerate(series.items()):
        if not points:
            continue
        colour = colours[index % len(colours)]
        x = [p.concurrency for p in points]
        levels.update(x)
        left.plot(x, [p.output_tok_s for p in points], "o-", color=colour, label=f"{label} output")
        left.plot(
            x,
            [p.total_tok_s for p in points],
            "s--",
            color=colour,
            alpha=0.6,
            label=f"{label} total",
        )
        right.plot(
            x, [p.median_ttft_ms for p in points], "o-", color=colour, label=f"{label} median TTFT"
        )
        right.plot(
            x, [p.median_itl_ms for p in points], "^:", color=colour, label=f"{label} median ITL"
        )
        right.plot(
            x,
            [p.mean_e2e_s * 1000.0 for p in points],
            "s--",
            color=colour,
            alpha=0.6,
            label=f"{label} mean E2E",
        )
    refs = [r for r in (baseline or {}).get("points") or [] if isinstance(r, dict)]
    if refs:
        left.plot(
            [int(r["concurrency"]) for r in refs],
            [float(r["output_tok_s"]) for r in refs],
            "kx",
            markersize=9,
            label="expected output (baseline)",
        )
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrency")
        if levels:
            axis.set_xticks(sorted(levels), [str(v) for v in sorted(levels)])
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    left.set_ylabel("tokens/s")
    left.set_title("Throughput")
    right.set_yscale("log")
    right.set_ylabel("ms (log)")
    right.set_title("Latency")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
