#!/usr/bin/python
"""Ansible module: check a keyring .deb (sha256 pin, key fingerprints) before it is installed."""

from __future__ import annotations

import hashlib

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_keyring import (
    KeyringError,
    check,
    keyrings_in_tar,
)

DOCUMENTATION = r"""
---
module: deb_keyring
short_description: Check a keyring package against a pinned sha256 and allowed key fingerprints
description:
  - Computes the sha256 of a downloaded keyring .deb, reads the OpenPGP keyrings it would
    install (files under usr/share/keyrings, etc/apt/keyrings and etc/apt/trusted.gpg.d, read
    from C(dpkg-deb --fsys-tarfile)) and fails, changing nothing, unless the sha256 is the
    pinned one (when a pin is given) and every primary key fingerprint is allowed.
  - The fingerprints are always checked. Without a pinned sha256 the sha256 is not checked;
    the module warns, naming the pin variable and the file's sha256, and goes on.
  - Role C(cuda_repo) runs it on NVIDIA's cuda-keyring before C(apt) installs it; the logic is
    plugins/module_utils/gpuhost_keyring.py.
options:
  path:
    description: The downloaded .deb.
    type: path
    required: true
  sha256:
    description:
      - The pinned sha256 of the .deb.
      - Empty skips this check with a warning that names the file's sha256.
    type: str
    default: ""
  fingerprints:
    description: Fingerprints of the keys the package may carry (spaces and case ignored).
    type: list
    elements: str
    required: true
  where:
    description: Which pin this is (the key in the sha256 variable, e.g. debian12/x86_64).
    type: str
    required: true
  sha256_var:
    description: Name of the variable holding the sha256 pins, for the messages.
    type: str
    default: sha256
  fingerprints_var:
    description: Name of the variable holding the fingerprints, for the messages.
    type: str
    default: fingerprints
author: gpuhost
"""

EXAMPLES = r"""
- name: Check the keyring before installing it
  gpuhost.gpu.deb_keyring:
    path: /tmp/cuda-keyring.deb
    sha256: "{{ pin }}"
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]
    where: debian12/x86_64
"""

RETURN = r"""
sha256:
  description: The .deb's sha256.
  returned: always
  type: str
sha256_checked:
  description: Whether the sha256 was checked against a pin (false - no pin, a warning said so).
  returned: success
  type: bool
keyrings:
  description: Keyring files in the package and the fingerprints of their primary keys and subkeys.
  returned: always
  type: dict
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "sha256": {"type": "str", "default": ""},
            "fingerprints": {"type": "list", "elements": "str", "required": True},
            "where": {"type": "str", "required": True},
            "sha256_var": {"type": "str", "default": "sha256"},
            "fingerprints_var": {"type": "str", "default": "fingerprints"},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    sha256 = digest.hexdigest()

    rc, out, err = module.run_command(["dpkg-deb", "--fsys-tarfile", path], encoding=None)
    if rc != 0:
        module.fail_json(msg=f"{path} is not a readable .deb: {err!r}", sha256=sha256)
    try:
        keyrings = keyrings_in_tar(out)
    except KeyringError as exc:
        module.fail_json(msg=f"{path}: cannot read its keyrings: {exc}", sha256=sha256)

    problems, warnings = check(
        sha256,
        module.params["sha256"],
        keyrings,
        module.params["fingerprints"],
        module.params["where"],
        module.params["sha256_var"],
        module.params["fingerprints_var"],
    )
    for warning in warnings:
        module.warn(warning)
    if problems:
        module.fail_json(
            msg=f"refusing to install {path}: " + "; ".join(problems) + ". Nothing was installed.",
            sha256=sha256,
            keyrings=keyrings,
        )
    pinned = bool((module.params["sha256"] or "").strip())
    module.exit_json(changed=False, sha256=sha256, sha256_checked=pinned, keyrings=keyrings)


if __name__ == "__main__":
    main()
