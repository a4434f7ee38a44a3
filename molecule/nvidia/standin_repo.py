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
import json
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
# While this file exists in a container, installing gpuhost-standin-interrupted kills its dpkg.
INTERRUPT_MARKER = "/etc/gpuhost-test/interrupt-dpkg"


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
    build_dcgm(out, arch)
    # For tests/test_5_interrupted_dpkg.py: a package whose postinst, while the marker file
    # exists, deletes it and SIGKILLs the dpkg that runs it - an install cut off half-way
    # (a killed apt, a lost connection), leaving dpkg's journal and a half-configured package
    # behind, the state in which every later apt run fails. Without the marker it configures.
    interrupt = textwrap.dedent(f"""\
        #!/bin/sh
        # {STANDIN}: simulates an interrupted install, once.
        set -e
        if [ "$1" = configure ] && [ -e {INTERRUPT_MARKER} ]; then
          rm -f {INTERRUPT_MARKER}
          kill -9 "$PPID"
        fi
        """)
    build_deb(
        out,
        "gpuhost-standin-interrupted",
        "1.0-1",
        "all",
        {},
        scripts={"postinst": interrupt},
    )
    packages = run("dpkg-scanpackages", "--multiversion", ".", cwd=out).stdout
    (out / "Packages").write_text(packages)
    with gzip.open(out / "Packages.gz", "wt") as handle:
        handle.write(packages)


# --- DCGM and its Prometheus exporter (role metrics' GPU exporter) -------------------------
# A real pair of releases: DCGM Exporter 4.8.3 is released "with DCGM 4.6.0" (NVIDIA's DCGM
# Exporter release notes, entry 4.6.0-4.8.3: docs.nvidia.com/datacenter/dcgm/latest/
# release-notes/dcgm-exporter.html). Debian versions as in the CUDA repository: the DCGM 4
# packages carry epoch 1 (datacenter-gpu-manager-4-core 1:4.6.0-1, e.g. the Build-Depends of
# Microsoft's dcgm-exporter 4.8.3 source package), the exporter <version>-1 (its file is
# datacenter-gpu-manager-exporter_<version>-1_amd64.deb).
DCGM_VERSION = "1:4.6.0-1"
DCGM_EXPORTER_VERSION = "4.8.3-1"
DCGM_EXPORTER_PAIR = "4.6.0-4.8.3"
# etc/default-counters.csv of github.com/NVIDIA/dcgm-exporter (the uncommented lines: field,
# Prometheus type, help), installed as /etc/dcgm-exporter/default-counters.csv like the real
# package; data/metrics/dcgm-exporter-default-counters.txt keeps the same names.
DCGM_DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "counter",
        "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "counter",
        "Total number of bytes received through PCIe RX (in KB) via NVML.",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)

# /usr/bin/dcgm-exporter of the stand-in. @PAIR@ is replaced when the package is built.
DCGM_EXPORTER_SCRIPT = r"""#!/usr/bin/python3
# gpuhost TEST DOUBLE: carries NVIDIA's package name and version, contains no NVIDIA software.
# Built by molecule/nvidia/standin_repo.py. Not NVIDIA's dcgm-exporter: no DCGM, no GPU. It
# takes the real exporter's -a/--address and -f/--collectors options and serves every field
# of the collectors CSV in Prometheus's text format for two made-up GPUs, labelled like the
# real exporter (gpu, UUID, pci_bus_id, device, modelName, hostname, DCGM_FI_DRIVER_VERSION).
import argparse
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAIR = "@PAIR@"
GPUS = (
    ("0", "GPU-5e1f7c8a-0d2b-4c3e-9a41-000000000000", "00000000:19:00.0"),
    ("1", "GPU-5e1f7c8a-0d2b-4c3e-9a41-000000000001", "00000000:3B:00.0"),
)
MODEL = "NVIDIA H200"
DRIVER = "580.95.05"
# Plausible values: gauges hold them, counters grow by them per second.
VALUES = {
    "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 3201,
    "DCGM_FI_DEV_MEMORY_TEMP": 41, "DCGM_FI_DEV_GPU_TEMP": 48,
    "DCGM_FI_DEV_POWER_USAGE": 385.5, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 385500,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 512000, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 768000,
    "DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_MEM_COPY_UTIL": 52,
    "DCGM_FI_DEV_FB_FREE": 8192, "DCGM_FI_DEV_FB_USED": 135168,
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 2400000,
}
STARTED = time.monotonic()


def collectors(path):
    fields = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#"):
                name, kind, text = [part.strip() for part in line.split(",", 2)]
                fields.append((name, kind, text))
    return fields


def render(fields):
    host = socket.gethostname()
    elapsed = time.monotonic() - STARTED
    out = []
    for name, kind, text in fields:
        out.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
        for gpu, uuid, bus in GPUS:
            value = VALUES.get(name, 0)
            if kind == "counter":
                value = int(value * (100 + elapsed))
            labels = (f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="{bus}",device="nvidia{gpu}",'
                      f'modelName="{MODEL}",hostname="{host}",DCGM_FI_DRIVER_VERSION="{DRIVER}"')
            out.append(f"{name}{{{labels}}} {value}\n")
    return "".join(out).encode()


def main():
    parser = argparse.ArgumentParser(prog="dcgm-exporter", description=__doc__)
    parser.add_argument("-a", "--address", default=":9400", help="HOST:PORT to listen on")
    parser.add_argument("-f", "--collectors", default="/etc/dcgm-exporter/default-counters.csv")
    parser.add_argument("-v", "--version", action="store_true")
    args = parser.parse_args()
    if args.version:
        print(f"dcgm-exporter version {PAIR} (gpuhost stand-in, a test double)")
        return
    host, sep, port = args.address.rpartition(":")
    if not sep or not port.isdigit():
        sys.exit(f"dcgm-exporter: --address {args.address!r}: expected HOST:PORT")
    host = host.strip("[]")
    fields = collectors(args.collectors)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = render(fields)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = Server((host or "0.0.0.0", int(port)), Handler)
    print(f"dcgm-exporter (stand-in) {PAIR}: serving {len(fields)} fields on {args.address}",
          flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
"""

# The unit of NVIDIA's package (packaging/config-files/systemd/nvidia-dcgm-exporter.service
# of github.com/NVIDIA/dcgm-exporter, installed as /lib/systemd/system/nvidia-dcgm-exporter.service
# by hack/package/stage-payload.sh): the same settings, here with the stand-in's note.
DCGM_EXPORTER_UNIT = f"""\
# {STANDIN}.
[Unit]
Description=NVIDIA DCGM-exporter service
Wants=nvidia-dcgm.service
After=nvidia-dcgm.service

[Service]
User=root
PrivateTmp=false

StandardOutput=append:/var/dcgm-exporter.log
StandardError=append:/var/dcgm-exporter.log

ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv

Restart=on-abort

[Install]
WantedBy=multi-user.target
"""


def dcgm_counters_csv() -> str:
    lines = [f"# {STANDIN}.", "# DCGM FIELD, Prometheus metric type, help message"]
    lines += [f"{name}, {kind}, {text}" for name, kind, text in DCGM_DEFAULT_COUNTERS]
    return "\n".join(lines) + "\n"


def build_dcgm(out: Path, arch: str) -> None:
    """datacenter-gpu-manager-4-core and datacenter-gpu-manager-exporter (stand-ins)."""
    build_deb(
        out,
        "datacenter-gpu-manager-4-core",
        DCGM_VERSION,
        arch,
        {"/usr/share/datacenter-gpu-manager-4/STAND-IN": (STANDIN + "\n", 0o644)},
    )
    build_deb(
        out,
        "datacenter-gpu-manager-exporter",
        DCGM_EXPORTER_VERSION,
        arch,
        {
            "/usr/bin/dcgm-exporter": (
                DCGM_EXPORTER_SCRIPT.replace("@PAIR@", DCGM_EXPORTER_PAIR),
                0o755,
            ),
            "/etc/dcgm-exporter/default-counters.csv": (dcgm_counters_csv(), 0o644),
            "/lib/systemd/system/nvidia-dcgm-exporter.service": (DCGM_EXPORTER_UNIT, 0o644),
        },
        # python3 only because the stand-in's exporter is a Python script.
        depends=f"datacenter-gpu-manager-4-core (>= {DCGM_VERSION.rsplit('-', 1)[0]}), python3",
        conffiles=("/etc/dcgm-exporter/default-counters.csv",),
    )
    # Pool file names carry no epoch (a ':' in a file: URI path is asking for trouble).
    for deb in out.glob("*_*:*.deb"):
        epoch = deb.name.split("_")[1].split(":")[0]
        deb.rename(deb.with_name(deb.name.replace(f"_{epoch}:", "_", 1)))


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
        # What the scenario pins for the keyring (cuda_repo_keyring_sha256 and
        # cuda_repo_keyring_fingerprints, read by ../converge.yml): the sha256 of each
        # directory's cuda-keyring .deb as built, and the throwaway key's fingerprint as gpg
        # reports it (independent of the role's own parser).
        colons = run(*gpg, "--with-colons", "--list-keys", env=env).stdout
        lines = colons.splitlines()
        fingerprints = [
            line.split(":")[9]
            for previous, line in zip(["", *lines], lines, strict=False)
            if line.startswith("fpr:") and previous.startswith("pub:")
        ]
        pins = {
            "keyring_sha256": {
                f"{distro}/x86_64": hashlib.sha256(
                    (out / distro / "x86_64" / "cuda-keyring_1.1-1_all.deb").read_bytes()
                ).hexdigest()
                for distro in DISTROS
            },
            "fingerprints": fingerprints,
        }
        (out / "pins.json").write_text(json.dumps(pins, indent=2) + "\n")
    finally:
        subprocess.run(("gpgconf", "--kill", "all"), env=env, check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    print(f"standin_repo: built {', '.join(DISTROS)} under {out}")


if __name__ == "__main__":
    main()
