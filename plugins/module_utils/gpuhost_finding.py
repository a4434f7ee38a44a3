# Copyright: gpuhost contributors
# Apache-2.0
"""One finding, the shape every check of the collection reports and `gpuhost check` reads:
{check, status, message, fix} (docs/facts.md, gpuhost_findings). Modules, filters and the
action plugin all make theirs here, so the shape and the allowed statuses exist once."""

from __future__ import annotations

STATUSES = ("pass", "warn", "fail")


def finding(check, status, message, fix=""):
    """A finding; a status other than pass, warn or fail is a programming error."""
    if status not in STATUSES:
        raise ValueError(f"finding {check!r}: status {status!r} is not one of {STATUSES}")
    return {"check": check, "status": status, "message": message, "fix": fix}


def prefixed(prefix):
    """finding() for the checks of one family: prefixed("doctor.")("gpu", ...) is doctor.gpu."""

    def make(check, status, message, fix=""):
        return finding(prefix + check, status, message, fix)

    return make


def merge_findings(existing, new, prefix):
    """Replace the findings whose check starts with `prefix`, keep the others (docs/facts.md)."""
    kept = [f for f in (existing or []) if not str(f.get("check", "")).startswith(prefix)]
    return kept + list(new)
