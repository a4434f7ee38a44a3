# Copyright: gpuhost contributors
# Apache-2.0
"""`sha256sum` output, read once for every role: the roles hash the server's config files
on the host in one command (the env file holds the API key, so only checksums leave the
host) and compare or name the sets here (filters config_drift and config_hashes)."""

from __future__ import annotations

import hashlib


def parse(text) -> dict[str, str]:
    """path -> sha256 from `sha256sum` output ("<hash>  <path>" per line); lines for files
    that do not exist ("sha256sum: ...: No such file") are not there."""
    found = {}
    for line in str(text or "").splitlines():
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            found[path] = digest
    return found


def set_hash(sums: dict[str, str], paths) -> str:
    """A short name for one config (its files' hashes together), "" unless all are there."""
    digests = [sums.get(p) for p in paths]
    if not digests or None in digests:
        return ""
    return hashlib.sha256(":".join(digests).encode()).hexdigest()[:12]


def config_hashes(text, sets: dict) -> dict[str, str]:
    """{name: set_hash} for each named list of paths."""
    sums = parse(text)
    return {name: set_hash(sums, list(paths)) for name, paths in sets.items()}
