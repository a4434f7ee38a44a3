"""Is dpkg in the middle of something? The pure half of the `dpkg_state` module.

An install that was interrupted (a killed apt, a lost SSH session, a reboot, a maintainer
script that failed) leaves dpkg's database in one of two shapes, and every later apt run
then fails until it is repaired:

- the journal: status changes dpkg wrote to <admindir>/updates/ (files named by digits) but
  never merged into <admindir>/status, because dpkg died. apt refuses to run: "E: dpkg was
  interrupted, you must manually run 'dpkg --configure -a' to correct the problem."
- packages whose status (the third word of dpkg-query's ${Status}; dpkg-query(1), "Package
  states" in dpkg(1)) is not final:
  - unpacked, half-configured, triggers-awaited, triggers-pending: the files are in place and
    configuring them is what `dpkg --configure -a` does (dpkg(1): "--configure --pending /
    -a: configure all unpacked but unconfigured packages"); it is safe to run unattended;
  - half-installed, or the "reinstreq" flag (the second word): the unpack or removal itself
    broke off, so the files may be half there. Configuring cannot fix that; the package has
    to be reinstalled or removed, which needs a person's decision.

The module reads `dpkg-query -W -f '${binary:Package}\\t${Version}\\t${Status}\\n'` and the
names in the updates directory; assess() decides.
"""

from __future__ import annotations

import os
import re

DPKG_QUERY_FORMAT = "${binary:Package}\\t${Version}\\t${Status}\\n"
CONFIGURABLE = ("unpacked", "half-configured", "triggers-awaited", "triggers-pending")
MANUAL = ("half-installed",)
_JOURNAL_ENTRY = re.compile(r"^\d+$")


def parse_status(text: str | None) -> list[dict]:
    """dpkg-query lines -> [{name, version, want, flag, state}] of every listed package."""
    packages = []
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        words = parts[2].split()
        if len(words) != 3:
            continue
        packages.append(
            {
                "name": parts[0],
                "version": parts[1],
                "want": words[0],
                "flag": words[1],
                "state": words[2],
            }
        )
    return packages


def journal_entries(names: list[str] | None) -> list[str]:
    """Names in <admindir>/updates that are pending journal entries (apt's own test)."""
    return sorted(n for n in (names or []) if _JOURNAL_ENTRY.match(n))


def assess(status_text: str | None, update_names: list[str] | None) -> dict:
    """What is unfinished, and what to do: none | configure | manual.

    configure: only configurable packages and/or a pending journal (`dpkg --configure -a`
    finishes them). manual: a package needs reinstalling or removing; the journal and the
    configurable ones are still finished first, then the role stops and says what is left.
    """
    packages = parse_status(status_text)
    journal = journal_entries(update_names)
    configurable = [p for p in packages if p["state"] in CONFIGURABLE and p["flag"] != "reinstreq"]
    manual = [p for p in packages if p["state"] in MANUAL or p["flag"] == "reinstreq"]
    parts = []
    if journal:
        parts.append(
            f"dpkg was interrupted: {len(journal)} status update(s) in its journal not applied"
        )
    if configurable:
        parts.append(
            "not configured: " + ", ".join(f"{p['name']} ({p['state']})" for p in configurable)
        )
    if manual:
        parts.append(
            "to reinstall or remove: "
            + ", ".join(f"{p['name']} ({p['state']}, {p['flag']})" for p in manual)
        )
    interrupted = bool(journal or configurable or manual)
    if manual:
        action = "manual"
    elif interrupted:
        action = "configure"
    else:
        action = "none"
    return {
        "interrupted": interrupted,
        "action": action,
        "configure": bool(journal or configurable),
        "journal": journal,
        "configurable": configurable,
        "manual": manual,
        "summary": "; ".join(parts) if parts else "dpkg's database is consistent",
    }


def missing(status_text: str | None, wanted: list[str] | None, arch: str = "") -> list[str]:
    """The names of `wanted` that dpkg does not list as installed ("install ok installed", or
    "hold ok installed" for a held one), in the order given: what an apt install of them
    would still do (role base installs only when one is missing). A name is installed when
    dpkg-query lists it as it is written, or, unqualified, as `name:<arch>` with `arch` the
    host's native architecture (dpkg-query qualifies Multi-Arch: same packages); anything
    else (a version `=`, a pattern, another architecture) counts as missing, so apt decides."""
    installed = {
        p["name"]
        for p in parse_status(status_text)
        if p["want"] in ("install", "hold") and (p["flag"], p["state"]) == ("ok", "installed")
    }

    def present(name: str) -> bool:
        return name in installed or bool(arch and ":" not in name and f"{name}:{arch}" in installed)

    return [name for name in wanted or [] if not present(name)]


def manual_fix(manual: list[dict]) -> str:
    """What a person runs for packages `dpkg --configure -a` cannot finish."""
    names = " ".join(p["name"] for p in manual)
    return (
        f"reinstall them (`apt-get install --reinstall {names}`) or, if that fails, remove them "
        f"(`dpkg --remove --force-remove-reinstreq {names}`), then run the play again"
    )


def read(run_command, admindir: str, packages: list[str] | None) -> dict:
    """The whole read of module dpkg_state (and of base_state's dpkg half): dpkg-query's
    status and the journal names assessed, with `fix` and `missing`. run_command is
    AnsibleModule.run_command; raises RuntimeError when dpkg-query cannot read admindir."""
    rc, out, err = run_command(
        ["dpkg-query", f"--admindir={admindir}", "-W", f"-f={DPKG_QUERY_FORMAT}"],
        check_rc=False,
        environ_update={"LC_ALL": "C"},
    )
    if rc != 0:
        raise RuntimeError(f"dpkg-query could not read {admindir}: {err.strip()}")
    try:
        updates = os.listdir(os.path.join(admindir, "updates"))
    except OSError:
        updates = []
    found = assess(out, updates)
    arch = ""
    if packages:
        rc, arch_out, _ = run_command(
            ["dpkg", f"--admindir={admindir}", "--print-architecture"], check_rc=False
        )
        arch = arch_out.strip() if rc == 0 else ""
    return dict(
        found,
        fix=manual_fix(found["manual"]) if found["manual"] else "",
        missing=missing(out, packages, arch),
    )
