# Copyright: gpuhost contributors
# Apache-2.0
"""Pinned weights: a model's branch resolved once to a commit sha, kept in the inventory.

The lock (inventory/<x>/models.lock.yml, on the controller) maps model -> branch -> sha. The
first run that serves a profile whose revision is a branch asks the hub which commit the
branch is at and writes it down; every later run, host, rebuild and rolling update reads the
sha from the lock, so they all serve the same weights, until `gpuhost models update` moves it
(src/gpuhost/commands/models.py). A revision that already is a sha is used as it is.

Controller-only, hence in plugins/plugin_utils (the action plugin sglang_profile imports it
as collection code, the CLI through gpuhost.plugin_code.plugin_utils). The hub is reached
over its HTTP API (GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true: the
commit sha and each file's size, what huggingface_hub's model_info(files_metadata=True)
reads); the tests point the endpoint at tests/standin/hf_standin.py's hub stand-in.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

import yaml

SHA = re.compile(r"[0-9a-f]{40}")
HEADER = (
    "# Pinned model revisions (gpuhost): written by the first run that resolved each branch,\n"
    "# read by every later run, host, rebuild and rolling update. Move a pin with\n"
    "# `gpuhost models update -i <inventory>`; edit by hand only to pin a sha you chose.\n"
)


class HubError(Exception):
    """The hub could not answer (unreachable, unknown repo or revision, bad answer)."""


def is_sha(revision):
    return bool(SHA.fullmatch(str(revision or "")))


def is_local(model):
    return str(model).startswith("/")


# --------------------------------------------------------------------------------------
# the hub


def hub_revision(endpoint, repo, revision, token=None, timeout=10.0):
    """{"sha": commit, "files": {path: size or None}} of repo at revision, from the hub."""
    url = (
        f"{endpoint.rstrip('/')}/api/models/{urllib.parse.quote(repo, safe='/')}/revision/"
        f"{urllib.parse.quote(str(revision), safe='')}?blobs=true"
    )
    request = urllib.request.Request(url, headers={"User-Agent": "gpuhost"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise HubError(f"{url.split('?')[0]}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HubError(f"{url.split('?')[0]}: {reason}") from exc
    sha = data.get("sha") if isinstance(data, dict) else None
    if not is_sha(sha):
        raise HubError(f"{url.split('?')[0]}: the answer has no commit sha")
    files = {}
    for item in data.get("siblings") or []:
        if isinstance(item, dict) and item.get("rfilename"):
            size = item.get("size")
            files[str(item["rfilename"])] = size if isinstance(size, int) else None
    return {"sha": sha, "files": files}


def weights_bytes(files):
    """Bytes of the weights in a file list: the *.safetensors, else the *.bin; None if unknown."""
    for suffix in (".safetensors", ".bin"):
        sizes = [s for name, s in files.items() if name.endswith(suffix)]
        if sizes:
            return sum(sizes) if all(isinstance(s, int) for s in sizes) else None
    return None


# --------------------------------------------------------------------------------------
# the lock file


def read_lock(path):
    """{model: {branch: {sha, ...}}}; {} when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return _models(yaml.safe_load(handle), path)
    except FileNotFoundError:
        return {}


def _models(doc, path):
    models = (doc or {}).get("models") if isinstance(doc, dict) or doc is None else None
    if models is None and doc:
        raise ValueError(f"{path}: expected a mapping with 'models:'")
    models = models or {}
    for model, branches in models.items():
        for branch, entry in (branches or {}).items():
            if not isinstance(entry, dict) or not is_sha(entry.get("sha")):
                raise ValueError(
                    f"{path}: models.{model}.{branch}.sha: got "
                    f"{(entry or {}).get('sha') if isinstance(entry, dict) else entry!r}; "
                    "allowed: a 40-character commit sha"
                )
    return models


def _dump(models):
    return HEADER + yaml.safe_dump({"models": models}, sort_keys=True, default_flow_style=False)


def locked(models, model, branch):
    return ((models.get(model) or {}).get(str(branch))) or None


def now():
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pin(path, model, branch, resolve, write=True):
    """The sha that `branch` of `model` is pinned to, pinning it first when it is not.

    resolve(model, branch) -> {"sha", "files"} asks the hub; it is called only when the lock
    has no entry, and before the file is touched, so a hub that does not answer leaves no
    file behind. The write happens under an exclusive lock on the file and the first writer
    wins: hosts resolving at once (Ansible forks) all return the sha that was written.
    write=False (check mode) never creates or changes the file.
    Returns {"sha", "pinned": "lock" | "new" | "would", "entry"}.
    """
    entry = locked(read_lock(path), model, branch)
    if entry:
        return {"sha": entry["sha"], "pinned": "lock", "entry": entry}
    entry = _entry(resolve(model, branch))
    if not write:
        return {"sha": entry["sha"], "pinned": "would", "entry": entry}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        models = _models(yaml.safe_load(handle.read()), path)
        first = locked(models, model, branch)
        if first:
            return {"sha": first["sha"], "pinned": "lock", "entry": first}
        models.setdefault(model, {})[str(branch)] = entry
        handle.seek(0)
        handle.truncate()
        handle.write(_dump(models))
        handle.flush()
        os.fsync(handle.fileno())
    return {"sha": entry["sha"], "pinned": "new", "entry": entry}


def _entry(info):
    entry = {"sha": info["sha"], "pinned_at": now()}
    size = weights_bytes(info.get("files") or {})
    if size:
        entry["weights_bytes"] = size
    return entry


def update(path, resolve, only=None):
    """Re-resolve every pinned branch (or those of the models in `only`) and write the moves.

    Returns [{model, branch, old, new}] for every entry looked at (old == new: unchanged).
    """
    changes = []
    with open(path, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        models = _models(yaml.safe_load(handle.read()), path)
        for model in sorted(models):
            if only and model not in only:
                continue
            for branch in sorted(models[model] or {}):
                old = models[model][branch]["sha"]
                info = resolve(model, branch)
                if info["sha"] != old:
                    models[model][branch] = _entry(info)
                changes.append({"model": model, "branch": branch, "old": old, "new": info["sha"]})
        handle.seek(0)
        handle.truncate()
        handle.write(_dump(models))
    return changes
