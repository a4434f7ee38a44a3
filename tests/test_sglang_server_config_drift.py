"""Role sglang_server restarts and gates a config that never passed the gate, not only one a
template just wrote: a run stopped between writing the files and restarting leaves such a
config, and the next run's templates report no change (plugins/filter/gpuhost_sglang_server.py
kept_drift, used by roles/sglang_server/tasks/configure.yml). Inputs are gpuhost.gpu.file_set's
results of its check_only entries (the known-good copy compared with the live file, in the
same call); molecule/sglang_server's test_interrupted_run_* shows the same end to end."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_sglang_server import kept_drift

NAMES = ["kept_unit", "kept_env"]


def entry(changed=False, fixed=(), created=(), refused=None):
    out = {"changed": changed, "path": "/x", "fixed": list(fixed), "created": list(created)}
    return out | ({"refused": refused} if refused else {})


def files(unit, env, **more):
    return {"unit": entry(), "kept_unit": unit, "kept_env": env, **more}


def test_interrupted_run_live_unit_differs_from_known_good():
    assert kept_drift(files(entry(True, ["content"]), entry()), NAMES)


def test_env_alone_differs():
    assert kept_drift(files(entry(), entry(True, ["content"])), NAMES)


def test_converged_host_has_no_drift():
    assert not kept_drift(files(entry(), entry()), NAMES)


def test_owner_or_mode_of_the_copy_alone_is_the_same_config():
    assert not kept_drift(files(entry(True, ["mode"]), entry(True, ["owner", "group"])), NAMES)


def test_first_deployment_has_nothing_to_compare():
    missing = entry(True, created=["/var/lib/gpuhost/sglang_server/known-good/unit"])
    assert not kept_drift(files(missing, entry(True, ["content"])), NAMES)


def test_a_copy_that_cannot_be_read_is_not_compared():
    refused = entry(True, refused="... is a symbolic link")
    assert not kept_drift(files(refused, entry(True, ["content"])), NAMES)


def test_names_must_be_entries():
    with pytest.raises(AnsibleFilterError, match="names of its known-good entries"):
        kept_drift(files(entry(), entry()), ["kept_unit", "kept_nft"])
    with pytest.raises(AnsibleFilterError, match="names of its known-good entries"):
        kept_drift(files(entry(), entry()), [])
