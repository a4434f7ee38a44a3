#!/usr/bin/env python3
"""Build the stand-in NVIDIA apt repository for molecule/nvidia. THIS IS A TEST DOUBLE.

NVIDIA's CUDA repository (developer.download.nvidia.com) cannot be reached from the test
machines. This script builds, on the control machine, a signed flat apt repository laid out
like NVIDIA's (<base>/debian12/x86_64/, <base>/debian13/x86_64/). Its packages carry NVIDIA's
real package names and versions, so the roles resolve, pin, hold and upgrade them exactly as
they would the real ones, but they contain no driver and no toolkit: marker files, a
persistence-daemon script that sleeps, and an nvcc script that prints a version banner.

    python3 standin_repo.py OUT_DIR KEY_FILE

OUT_DIR is emptied and refilled (the scenario bind-mounts it into the containers); KEY_FILE
keeps the throwaway signing key between builds so containers keep trusting the repository.
Needs dpkg-deb, dpkg-scanpackages (dpkg-dev) and gpg (gnupg).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

DISTROS = ("debian12", "debian13")
# Real NVIDIA driver releases: two of each of the 570 and 580 branches (an exact-release pin
# must hold the older one) and one of 590 (the branch pin must keep apt from moving to it).
DRIVER_VERSIONS = ("570.172.08", "570.195.03", "580.95.05", "580.105.08", "590.48.01")
MAINTAINER = "gpuhost tests <standin@gpuhost.invalid>"
STANDIN = (
    "gpuhost TEST DOUBLE: carries NVIDIA's package name and version, contains no NVIDIA software"
)

# nvcc banners: the 13.0 one is the real banner recorded on the 2x H200 host (see
# tests/fixtures/gpu-hosts/h200x2-nvlink-firecracker/SOURCE.md); 12.8 follows its format.
NVCC_BANNERS = {
    "12.8": ("Fri_Feb_21_20:23:50_PST_2025", "V12.8.93", "cuda_12.8.r12.8/compiler.35583870_0"),
    "13.0": ("Wed_Aug_20_01:58:59_PM_PDT_2025", "V13.0.88", "cuda_13.0.r13.0/compiler.36424714_0"),
}
TOOLKITS = {"12.8": "12.8.1-1", "13.0": "13.0.2-1"}


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, text=True, capture_output=True, **kwargs)


def need_tools() -> None:
    missing = [t for t in ("dpkg-deb", "dpkg-scanpackages", "gpg") if shutil.which(t) is None]
    if missing:
        sys.exit(f"standin_repo: missing {', '.join(missing)} (apt-get install dpkg-dev gnupg)")


def build_deb(
    out: Path,
    name: str,
    version: str,
    arch: str,
    files: dict[str, tuple[str | bytes, int]],
    depends: str = "",
    scripts: dict[str, str] | None = None,
    conffiles: tuple[str, ...] = (),
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, (content, mode) in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
            target.chmod(mode)
        doc = root / "usr/share/doc" / name / "STAND-IN"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(STANDIN + "\n")
        control = root / "DEBIAN"
        control.mkdir()
        fields = [
            f"Package: {name}",
            f"Version: {version}",
            f"Architecture: {arch}",
            f"Maintainer: {MAINTAINER}",
            "Section: NVIDIA",
            "Priority: optional",
        ]
        if depends:
            fields.append(f"Depends: {depends}")
        fields.append(f"Description: STAND-IN for NVIDIA's {name} (gpuhost test double)")
        fields.append(f" {STANDIN}.")
        (control / "control").write_text("\n".join(fields) + "\n")
        if conffiles:
            (control / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
        for script, body in (scripts or {}).items():
            (control / script).write_text(body)
            (control / script).chmod(0o755)
        run(
            "dpkg-deb",
            "--root-owner-group",
            "-Zgzip",
            "--build",
            str(root),
            str(out / f"{name}_{version}_{arch}.deb"),
        )


def nvcc_script(release: str) -> str:
    built, full, build = NVCC_BANNERS[release]
    return textwrap.dedent(f"""\
        #!/bin/sh
        # {STANDIN}. Prints the banner of CUDA {release}'s nvcc; compiles nothing.
        cat <<'BANNER'
        nvcc: NVIDIA (R) Cuda compiler driver
        Copyright (c) 2005-2025 NVIDIA Corporation
        Built on {built}
        Cuda compilation tools, release {release}, {full}
        Build {build}
        BANNER
        """)


def build_distro(out: Path, distro: str, keyring: bytes, arch: str) -> None:
    out.mkdir(parents=True)
    # cuda-keyring ships the key and an apt source hard-wired to NVIDIA's URL, as the real
    # package does; the cuda_repo role must replace that source with its own.
    source = (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/ /\n"
    )
    build_deb(
        out,
        "cuda-keyring",
        "1.1-1",
        "all",
        {
            "/usr/share/keyrings/cuda-archive-keyring.gpg": (keyring, 0o644),
            f"/etc/apt/sources.list.d/cuda-{distro}-x86_64.list": (source, 0o644),
        },
        conffiles=(f"/etc/apt/sources.list.d/cuda-{distro}-x86_64.list",),
    )
    for version in DRIVER_VERSIONS:
        deb_version = f"{version}-1"
        # Dependencies are declared ">=" like NVIDIA's Debian packages: without a pin apt
        # would pull them to the newest release (the split the role must prevent).
        build_deb(
            out,
            "nvidia-open",
            deb_version,
            arch,
            {},
            depends=f"nvidia-kernel-open-dkms (>= {version}), nvidia-driver-cuda (>= {version})",
        )
        build_deb(
            out,
            "nvidia-kernel-open-dkms",
            deb_version,
            arch,
            {f"/usr/src/nvidia-{version}/STAND-IN": (STANDIN + "\n", 0o644)},
        )
        build_deb(
            out,
            "nvidia-driver-cuda",
            deb_version,
            arch,
            {},
            depends=f"nvidia-persistenced (>= {version})",
        )
        daemon = f"#!/bin/sh\n# {STANDIN}.\nexec sleep infinity\n"
        unit = textwrap.dedent(f"""\
            # {STANDIN}.
            [Unit]
            Description=NVIDIA Persistence Daemon (gpuhost stand-in)

            [Service]
            ExecStart=/usr/bin/nvidia-persistenced

            [Install]
            WantedBy=multi-user.target
            """)
        build_deb(
            out,
            "nvidia-persistenced",
            deb_version,
            arch,
            {
                "/usr/bin/nvidia-persistenced": (daemon, 0o755),
                "/usr/lib/systemd/system/nvidia-persistenced.service": (unit, 0o644),
            },
        )
    for release, deb_version in TOOLKITS.items():
        home = f"/usr/local/cuda-{release}"
        major = release.split(".")[0]
        priority = release.replace(".", "")
        # Like NVIDIA's packages, register the toolkit as the "cuda" and "cuda-<major>"
        # alternatives of /usr/local/cuda and /usr/local/cuda-<major>.
        postinst = textwrap.dedent(f"""\
            #!/bin/sh
            set -e
            update-alternatives --install /usr/local/cuda cuda {home} {priority}
            update-alternatives --install /usr/local/cuda-{major} cuda-{major} {home} {priority}
            """)
        prerm = textwrap.dedent(f"""\
            #!/bin/sh
            set -e
            if [ "$1" = remove ]; then
              update-alternatives --remove cuda {home}
              update-alternatives --remove cuda-{major} {home}
            fi
            """)
        build_deb(
            out,
            f"cuda-toolkit-{release.replace('.', '-')}",
            deb_version,
            arch,
            {
                f"{home}/bin/nvcc": (nvcc_script(release), 0o755),
                f"{home}/lib64/STAND-IN": (STANDIN + "\n", 0o644),
            },
            scripts={"postinst": postinst, "prerm": prerm},
        )
    packages = run("dpkg-scanpackages", "--multiversion", ".", cwd=out).stdout
    (out / "Packages").write_text(packages)
    with gzip.open(out / "Packages.gz", "wt") as handle:
        handle.write(packages)


def release_file(out: Path, arch: str) -> str:
    lines = [
        "Origin: gpuhost stand-in (TEST DOUBLE, not NVIDIA)",
        "Label: gpuhost stand-in",
        f"Architectures: {arch} all",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (out / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    need_tools()
    out, key_file = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    arch = run("dpkg", "--print-architecture").stdout.strip()
    out.mkdir(parents=True, exist_ok=True)
    # Empty, not recreate: the containers bind-mount this very directory.
    for child in out.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()

    home = tempfile.mkdtemp(prefix="standin-gpg-")
    env = {**os.environ, "GNUPGHOME": home}
    gpg = ("gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "")
    try:
        if not key_file.exists():
            run(
                *gpg,
                "--quick-gen-key",
                "gpuhost stand-in repository (TEST DOUBLE, not NVIDIA) <standin@gpuhost.invalid>",
                "ed25519",
                "sign",
                "never",
                env=env,
            )
            key_file.parent.mkdir(parents=True, exist_ok=True)
            key_file.write_text(run(*gpg, "--armor", "--export-secret-keys", env=env).stdout)
        else:
            run(*gpg, "--import", str(key_file), env=env)
        keyring = subprocess.run(
            ("gpg", "--batch", "--export"), check=True, capture_output=True, env=env
        ).stdout
        for distro in DISTROS:
            repo = out / distro / "x86_64"
            build_distro(repo, distro, keyring, arch)
            (repo / "Release").write_text(release_file(repo, arch))
            run(*gpg, "--digest-algo", "SHA512", "--clearsign", "-o", str(repo / "InRelease"),
                str(repo / "Release"), env=env)  # fmt: skip
            run(*gpg, "--digest-algo", "SHA512", "--armor", "--detach-sign", "-o",
                str(repo / "Release.gpg"), str(repo / "Release"), env=env)  # fmt: skip
        (out / "README").write_text(STANDIN + "\nBuilt by molecule/nvidia/standin_repo.py.\n")
    finally:
        subprocess.run(("gpgconf", "--kill", "all"), env=env, check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    print(f"standin_repo: built {', '.join(DISTROS)} under {out}")


if __name__ == "__main__":
    main()
