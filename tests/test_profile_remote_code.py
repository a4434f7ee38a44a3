"""--trust-remote-code runs Python from the model repository inside the server: the profile
validator serves it only from a commit sha (issue 15, item 2). The revision it checks is the
one served, after the inventory's models lock pinned a branch (plugins/action/sglang_profile.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.plugin_utils import gpuhost_profile as profile

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = json.loads(
    sorted((ROOT / "data" / "sglang").glob("catalogue-*.json"))[0].read_text(encoding="utf-8")
)
SHA = "87663416be779d980e4aa102edc328b85d7802f6"
DOC = {"model": "org/remote-code-model", "tp_size": 1, "flags": {"--trust-remote-code": True}}


def _check(overrides=None, doc=None, policy=None):
    eff = profile.resolve(doc or DOC, overrides or {})
    return profile.validate(eff, CATALOGUE, policy=policy)


def _remote_code_errors(result):
    return [e for e in result["errors"] if "--trust-remote-code" in e]


@pytest.mark.parametrize(
    "revision", ["main", "v1.0", SHA[:12], SHA.upper(), f"{SHA}0", "refs/pr/1", ""]
)
def test_a_revision_that_is_not_a_commit_sha_is_refused(revision):
    result = _check({"revision": revision}, doc={**DOC, "revision": revision or "main"})
    shown = revision or "main"
    assert _remote_code_errors(result) == [
        f"revision: got {shown!r} for org/remote-code-model with --trust-remote-code; allowed: "
        "a 40-hex commit sha, because the server runs the repository's own Python code at that "
        "revision and a branch can move. Pin it in the profile's revision, in "
        "sglang_server_revision, or in the inventory's models lock (sglang_server_models_lock: "
        "the first run that reaches the hub pins the branch there), or drop --trust-remote-code"
    ]
    finding = [f for f in result["findings"] if f["check"] == "sglang_server.trust_remote_code"]
    assert [f["status"] for f in finding] == ["fail"]


def test_a_commit_sha_is_served():
    result = _check({"revision": SHA})
    assert _remote_code_errors(result) == []
    finding = [f for f in result["findings"] if f["check"] == "sglang_server.trust_remote_code"]
    assert finding[0]["status"] == "pass" and SHA[:12] in finding[0]["message"]


def test_without_remote_code_a_branch_is_allowed():
    doc = {**DOC, "flags": {}}
    assert _remote_code_errors(_check({"revision": "main"}, doc=doc)) == []
    off = _check({"revision": "main", "flags": {"--trust-remote-code": False}})
    assert _remote_code_errors(off) == []


def test_local_weights_have_no_revision_to_pin():
    result = _check({"model": "/srv/models/mine", "revision": "main"})
    assert _remote_code_errors(result) == []


def test_no_policy_loosens_the_pin():
    # The stand-in used to be let off this check; a test setup now pins a sha like a host.
    result = _check({"revision": "main"}, policy={"standin": True, "force_kv_cache_auto": True})
    assert len(_remote_code_errors(result)) == 1
