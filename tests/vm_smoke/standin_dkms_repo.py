#!/usr/bin/env python3
"""The stand-in NVIDIA apt repository for `make vm-smoke`, with a DKMS package that builds.
THIS IS A TEST DOUBLE.

It is molecule/nvidia/standin_repo.py's repository (NVIDIA's package names and versions, no
NVIDIA software; that file is used unchanged) with one difference: every
nvidia-kernel-open-dkms package carries a real, tiny kernel module source registered with
DKMS under NVIDIA's module name (`nvidia`, with `nvidia-uvm` beside it), so the path role
nvidia_driver takes on a real host (apt installs the DKMS package, its postinst has DKMS
build and install the modules against the running kernel, signed with the MOK where
/etc/dkms/framework.conf.d says so, then modprobe) really runs in the VM. The modules do
nothing but load and report the stand-in version in /sys/module/nvidia/version.

    python3 standin_dkms_repo.py OUT_DIR KEY_FILE
"""

from __future__ import annotations

import gzip
import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "standin_repo", ROOT / "molecule" / "nvidia" / "standin_repo.py"
)
standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin)

NOTE = "gpuhost TEST DOUBLE (tests/vm_smoke): a tiny module under NVIDIA's module name"


def module_source(name: str, version: str) -> str:
    return textwrap.dedent(f"""\
        // SPDX-License-Identifier: GPL-2.0
        // {NOTE}; no NVIDIA code. Loads, logs one line, unloads.
        #include <linux/init.h>
        #include <linux/module.h>

        static int __init standin_init(void)
        {{
        \tpr_info("{name} (gpuhost stand-in) {version} loaded\\n");
        \treturn 0;
        }}

        static void __exit standin_exit(void)
        {{
        \tpr_info("{name} (gpuhost stand-in) unloaded\\n");
        }}

        module_init(standin_init);
        module_exit(standin_exit);
        MODULE_LICENSE("Dual MIT/GPL");
        MODULE_VERSION("{version}");
        MODULE_DESCRIPTION("{NOTE}");
        """)


def dkms_files(version: str) -> dict[str, tuple[str, int]]:
    src = f"/usr/src/nvidia-{version}"
    # dkms.conf(5) fields as in dkms(8); NVIDIA's package also names its source nvidia-<ver>.
    build = "${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build"
    conf = textwrap.dedent(f"""\
        # {NOTE}.
        PACKAGE_NAME="nvidia"
        PACKAGE_VERSION="{version}"
        MAKE[0]="make -C ${{kernel_source_dir}} M={build} modules"
        CLEAN="make -C ${{kernel_source_dir}} M={build} clean"
        BUILT_MODULE_NAME[0]="nvidia"
        DEST_MODULE_LOCATION[0]="/updates/dkms"
        BUILT_MODULE_NAME[1]="nvidia-uvm"
        DEST_MODULE_LOCATION[1]="/updates/dkms"
        AUTOINSTALL="yes"
        """)
    return {
        f"{src}/dkms.conf": (conf, 0o644),
        f"{src}/Kbuild": ("obj-m := nvidia.o nvidia-uvm.o\n", 0o644),
        f"{src}/nvidia.c": (module_source("nvidia", version), 0o644),
        f"{src}/nvidia-uvm.c": (module_source("nvidia-uvm", version), 0o644),
        f"{src}/STAND-IN": (standin.STANDIN + "\n" + NOTE + "\n", 0o644),
    }


def maintainer_scripts(version: str) -> dict[str, str]:
    # What a dh_dkms postinst does, in short: add the source, build and install for the
    # running kernel (dkms(8): add, build, install); prerm removes it.
    postinst = textwrap.dedent(f"""\
        #!/bin/sh
        # {NOTE}.
        set -e
        if [ "$1" = configure ]; then
          dkms status -m nvidia -v {version} | grep -q . || dkms add -m nvidia -v {version}
          dkms install -m nvidia -v {version} -k "$(uname -r)"
        fi
        """)
    prerm = textwrap.dedent(f"""\
        #!/bin/sh
        # {NOTE}.
        set -e
        dkms remove -m nvidia -v {version} --all || true
        """)
    return {"postinst": postinst, "prerm": prerm}


_original_build_distro = standin.build_distro


def build_distro(out: Path, distro: str, keyring: bytes, arch: str) -> None:
    _original_build_distro(out, distro, keyring, arch)
    for version in standin.DRIVER_VERSIONS:
        standin.build_deb(
            out,
            "nvidia-kernel-open-dkms",
            f"{version}-1",
            arch,
            dkms_files(version),
            depends="dkms",
            scripts=maintainer_scripts(version),
        )
    # The index again, now over the replaced packages (as standin_repo.build_distro ends).
    packages = standin.run("dpkg-scanpackages", "--multiversion", ".", cwd=out).stdout
    (out / "Packages").write_text(packages)
    with gzip.open(out / "Packages.gz", "wt") as handle:
        handle.write(packages)


def main() -> None:
    standin.build_distro = build_distro
    standin.main()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main()
