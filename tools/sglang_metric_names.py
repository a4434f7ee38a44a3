#!/usr/bin/env python3
"""Write the Prometheus metric names an sglang wheel defines to data/metrics/sglang-<v>.txt.

    pip download sglang==0.5.10.post1 --no-deps -d /tmp/sgl
    python tools/sglang_metric_names.py /tmp/sgl/sglang-0.5.10.post1-py3-none-any.whl

Reads the wheel's Python source (no import: sglang needs a GPU stack) and lists every
prometheus_client Counter/Gauge/Histogram/Summary (and SGLang's GaugeHistogram) constructed
with a literal name, with its type. tests/test_metrics.py checks the dashboard against it.
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
         "GaugeHistogram": "gauge"}  # fmt: skip


def names(wheel: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not member.endswith(".py") or not member.startswith("sglang/"):
                continue
            text = archive.read(member).decode("utf-8", "replace")
            if "prometheus" not in text and "Histogram" not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                kind = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if kind not in KINDS:
                    continue
                args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "name")]
                for arg in args:
                    if (
                        isinstance(arg, ast.Constant)
                        and isinstance(arg.value, str)
                        and re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", arg.value)
                    ):
                        found[arg.value] = KINDS[kind]
    return found


def main(argv: list[str]) -> int:
    wheel = Path(argv[1])
    version = wheel.name.split("-")[1]
    out = ROOT / "data" / "metrics" / f"sglang-{version}.txt"
    lines = [
        f"# Prometheus metrics defined by sglang {version} (--enable-metrics), read from the",
        f"# wheel's source by tools/sglang_metric_names.py ({wheel.name}).",
        "# One `name type` a line; a histogram is exposed as name_bucket/_sum/_count, a counter",
        "# as name_total.",
    ]
    lines += [f"{name} {kind}" for name, kind in sorted(names(wheel).items())]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(lines) - 4} names)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
