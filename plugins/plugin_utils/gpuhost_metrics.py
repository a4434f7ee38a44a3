# Copyright: gpuhost contributors
# Apache-2.0
"""Metrics (role metrics): Prometheus file_sd fragments, and the dashboard's metric names
checked against what the exporters really export. Pure; tests/test_metrics.py.

file_sd format (Prometheus docs, "file_sd_config"): a JSON list of {targets: [host:port],
labels: {...}}. The names SGLang 0.5.10.post1 exports are kept in
data/metrics/sglang-0.5.10.post1.txt (read from the wheel's source, see that file's header).
"""

from __future__ import annotations

import json
import re

JOBS = ("node", "gpu", "sglang")
# A PromQL metric name (https://prometheus.io/docs/concepts/data_model/); SGLang's contain ':'.
_NAME = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b")
# PromQL words that look like names but are functions, keywords or label matchers.
_PROMQL_WORDS = {
    "sum", "avg", "max", "min", "count", "rate", "irate", "increase", "by", "without", "on",
    "ignoring", "group_left", "group_right", "histogram_quantile", "le", "bool", "and", "or",
    "unless", "offset", "topk", "bottomk", "clamp_min", "clamp_max", "delta", "deriv",
    "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "abs", "instance",
    "job", "gpu", "mode", "device", "Hostname", "UUID", "modelName", "model_name", "time",
    "vector", "scalar", "label_replace", "changes", "resets", "mountpoint", "fstype",
}  # fmt: skip


def file_sd_groups(hosts, job):
    """[{inventory_hostname, gpuhost_metrics}] -> the file_sd list for one job."""
    if job not in JOBS:
        raise ValueError(f"job {job!r}: one of {', '.join(JOBS)}")
    groups = []
    for host in hosts:
        metrics = host.get("gpuhost_metrics") or {}
        target = (metrics.get("targets") or {}).get(job)
        if target:
            groups.append(
                {
                    "targets": [target],
                    "labels": {"gpuhost_host": host["inventory_hostname"], "gpuhost_job": job},
                }
            )
    return groups


def expressions(dashboard):
    """Every PromQL expression of a Grafana dashboard (panels and rows, recursively)."""
    out = []

    def walk(panels):
        for panel in panels or []:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    out.append(target["expr"])
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    return out


def metric_names(expr):
    """Metric names an expression reads: identifiers outside {...} matchers and strings."""
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r'"[^"]*"', "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set()
    for name in _NAME.findall(text):
        if name in _PROMQL_WORDS or name.isdigit() or re.fullmatch(r"\d+[smhdwy]", name):
            continue
        names.add(name)
    return names


def exposed_names(family):
    """A metric family as Prometheus exposes it: a histogram adds _bucket/_sum/_count, a
    counter _total (prometheus_client adds it when the name lacks it)."""
    name, kind = family
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    if kind == "counter":
        base = name[: -len("_total")] if name.endswith("_total") else name
        return {f"{base}_total"}
    return {name}


def read_name_list(text):
    """data/metrics/*.txt: `name type` lines, # comments."""
    out = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, kind = [*line.split(), "gauge"][:2]
            out |= exposed_names((name, kind))
    return out


def unknown_names(dashboard, known):
    """Metric names the dashboard reads that no list knows: {name: [expressions]}."""
    missing = {}
    for expr in expressions(dashboard):
        for name in metric_names(expr):
            if name not in known:
                missing.setdefault(name, []).append(expr)
    return missing


def load_dashboard(text):
    return json.loads(text)
