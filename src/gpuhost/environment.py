"""The environment ansible-playbook gets: only what Ansible and the playbooks need.

The caller's shell may hold cloud credentials, tokens of other tools and the like; none of
that is Ansible's business, and ansible-runner would copy all of it into the run's `command`
artifact. Kept: the process basics (PATH, HOME, user, locale, TZ, TMPDIR), ANSIBLE_*, the
ssh agent, GPUHOST_* (the playbooks read GPUHOST_SGLANG_API_KEY and GPUHOST_ROUTER_ADMIN_KEY),
HF_TOKEN (role model_cache reads it; as every secret-named variable it reaches ansible-playbook
through handover.py only, never the record), HF_ENDPOINT (a Hugging Face mirror), the
proxies (http_proxy, https_proxy, no_proxy, all_proxy, either case), the TLS trust settings
(REQUESTS_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR, CURL_CA_BUNDLE: a Proxmox API or a mirror
behind a private CA), DOCKER_* (the docker connection of the test containers) and
MOLECULE_* (scenario paths the molecule inventories look up). docs/cli.md lists them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from gpuhost.project import Project

PROXY_VARIABLES = tuple(
    name
    for base in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
    for name in (base, base.upper())
)
TLS_TRUST_VARIABLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE")
_KEEP = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|LANG|LANGUAGE|TZ|TMPDIR|SSH_AUTH_SOCK|VIRTUAL_ENV|HF_TOKEN"
    r"|HF_ENDPOINT|" + "|".join((*PROXY_VARIABLES, *TLS_TRUST_VARIABLES)) + r")$"
    r"|^(LC_|ANSIBLE_|GPUHOST_|DOCKER_|MOLECULE_)"
)


def kept(name: str) -> bool:
    return bool(_KEEP.match(name))


def minimal(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if kept(k)}


def for_ansible(project: Project, ansible_bin: Path) -> dict[str, str]:
    """The minimal environment plus gpuhost's settings for ansible-playbook."""
    env = minimal(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(project.ansible_cfg),
            # ansible-playbook beside this interpreter wins (a venv not activated).
            "PATH": os.pathsep.join([str(ansible_bin), os.environ.get("PATH", "")]),
            # The stdout artifact is for people reading it later, not for a terminal.
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    return env
