"""Role sglang_server restarts and gates a config that never passed the gate, not only one a
template just wrote: a run stopped between writing the files and restarting leaves such a
config, and the next run's templates report no change (plugins/filter/gpuhost_sglang_server.py,
used by roles/sglang_server/tasks/configure.yml). Inputs are `sha256sum` output as the role
reads it; molecule/sglang_server's test_interrupted_run_* shows the same end to end."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_sglang_server import config_drift

UNIT, ENV = "/etc/systemd/system/sglang-server.service", "/etc/gpuhost/sglang-server.env"
KG = "/var/lib/gpuhost/sglang_server/known-good"
LIVE, GOOD = [UNIT, ENV], [f"{KG}/unit", f"{KG}/env"]
A, B, C = "a" * 64, "b" * 64, "c" * 64


def sums(**files):
    return "\n".join(f"{digest}  {path}" for path, digest in files.items())


def test_interrupted_run_live_files_differ_from_known_good():
    # The unit was rewritten (B), the known-good copy still holds the old one (A).
    assert config_drift(sums(**{UNIT: B, ENV: C, GOOD[0]: A, GOOD[1]: C}), LIVE, GOOD)


def test_env_alone_differs():
    assert config_drift(sums(**{UNIT: A, ENV: B, GOOD[0]: A, GOOD[1]: C}), LIVE, GOOD)


def test_converged_host_has_no_drift():
    assert not config_drift(sums(**{UNIT: A, ENV: C, GOOD[0]: A, GOOD[1]: C}), LIVE, GOOD)


def test_first_deployment_has_nothing_to_compare():
    # sha256sum exits 1 and prints only the files it found.
    assert not config_drift(sums(**{UNIT: A, ENV: C}), LIVE, GOOD)
    assert not config_drift("", LIVE, GOOD)


def test_a_half_known_good_copy_is_not_compared():
    assert not config_drift(sums(**{UNIT: A, ENV: C, GOOD[0]: B}), LIVE, GOOD)


def test_live_file_gone_but_known_good_kept_differs():
    assert config_drift(sums(**{ENV: C, GOOD[0]: A, GOOD[1]: C}), LIVE, GOOD)


def test_paths_must_pair():
    with pytest.raises(AnsibleFilterError, match="as many live paths"):
        config_drift("", LIVE, GOOD[:1])
