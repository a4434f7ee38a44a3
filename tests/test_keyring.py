"""The cuda-keyring check (module deb_keyring, plugins/module_utils/gpuhost_keyring.py).

Keys are made by the real gpg in a throwaway GNUPGHOME and packed into a real .deb with
dpkg-deb, then read back through `dpkg-deb --fsys-tarfile` as the module does; the
fingerprints the parser computes are compared with gpg's own."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_keyring as kr

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and shutil.which("dpkg-deb")), reason="needs gpg and dpkg-deb"
)


def _gpg(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        env={**os.environ, "GNUPGHOME": str(home)},
        capture_output=True,
        check=True,
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two throwaway keys (gpg's default, with a subkey; RSA): {uid: (fpr, binary, armored)}."""
    out = {}
    for uid, algo in (
        ("trusted <t@gpuhost.invalid>", "default"),
        ("other <o@x.invalid>", "rsa2048"),
    ):
        home = tmp_path_factory.mktemp("gnupg")
        home.chmod(0o700)
        _gpg(home, "--quick-gen-key", uid, algo, "default", "never")
        colons = _gpg(home, "--with-colons", "--list-keys").stdout.decode()
        fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        out[uid.split()[0]] = (
            fpr,
            _gpg(home, "--export").stdout,
            _gpg(home, "--armor", "--export").stdout,
        )
        subprocess.run(
            ["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(home)}, check=False
        )
    return out


def _deb(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "pkg"
    for path, data in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    (root / "DEBIAN/control").write_text(
        "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\n"
        "Maintainer: t <t@gpuhost.invalid>\nDescription: test keyring (gpuhost tests)\n"
    )
    deb = tmp_path / "cuda-keyring_1.1-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
                   check=True, capture_output=True)  # fmt: skip
    return deb


def _read(deb: Path) -> tuple[str, dict]:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    return hashlib.sha256(deb.read_bytes()).hexdigest(), kr.keyrings_in_tar(tar.stdout)


def test_fingerprints_match_gpg(keys):
    for fpr, binary, armored in keys.values():
        assert kr.keyring_keys(binary)["primary"] == [fpr]
        assert kr.keyring_keys(armored)["primary"] == [fpr]
    # gpg's default key has an encryption subkey; it belongs to the primary and is listed apart.
    assert len(kr.keyring_keys(keys["trusted"][1])["subkeys"]) == 1


def _check(sha, pin, keyrings, allowed):
    """The problems (each refuses the package); warnings must be none."""
    problems, warnings = kr.check(sha, pin, keyrings, allowed, "debian12/x86_64", "pins", "fprs")
    assert warnings == []
    return problems


def test_the_pinned_package_with_the_allowed_key_passes(tmp_path, keys):
    fpr, binary, _ = keys["trusted"]
    deb = _deb(tmp_path, {"/usr/share/keyrings/cuda-archive-keyring.gpg": binary})
    sha, keyrings = _read(deb)
    assert keyrings == {"/usr/share/keyrings/cuda-archive-keyring.gpg": kr.keyring_keys(binary)}
    spaced = " ".join(fpr[i : i + 4] for i in range(0, 40, 4)).lower()
    assert _check(sha, sha.upper(), keyrings, [spaced]) == []


def test_a_changed_package_is_refused(tmp_path, keys):
    fpr, binary, _ = keys["trusted"]
    sha, keyrings = _read(_deb(tmp_path, {"/usr/share/keyrings/cuda-archive-keyring.gpg": binary}))
    problems = _check(sha, "0" * 64, keyrings, [fpr])
    assert problems == [
        f"sha256 {sha} is not the one pinned in pins['debian12/x86_64'] ({'0' * 64})"
    ]


def test_no_pin_goes_on_with_a_warning_naming_the_variable(tmp_path, keys):
    # NVIDIA's real repository cannot be reached from where the defaults are written, so no
    # sha256 ships: a first install must not stop here, but say that the sha256 went unchecked.
    fpr, binary, _ = keys["trusted"]
    sha, keyrings = _read(_deb(tmp_path, {"/usr/share/keyrings/cuda-archive-keyring.gpg": binary}))
    for pin in ("", "  ", None):
        problems, [warning] = kr.check(sha, pin, keyrings, [fpr], "debian12/x86_64", "pins", "fprs")
        assert problems == []
        assert warning.startswith("pins has no sha256 for 'debian12/x86_64'")
        assert "not checked" in warning and sha in warning
        assert f"pins: {{'debian12/x86_64': '{sha}'}}" in warning


def test_no_pin_still_refuses_a_key_that_is_not_allowed(tmp_path, keys):
    # The fingerprint check does not depend on the pin: an unpinned package with a key the
    # inventory does not list is refused (and the warning about the pin is still given).
    fpr = keys["trusted"][0]
    other_fpr, other, _ = keys["other"]
    sha, keyrings = _read(_deb(tmp_path, {"/usr/share/keyrings/cuda-archive-keyring.gpg": other}))
    problems, [warning] = kr.check(sha, "", keyrings, [fpr], "debian12/x86_64", "pins", "fprs")
    assert problems == [
        f"/usr/share/keyrings/cuda-archive-keyring.gpg holds key {other_fpr}, "
        "which fprs does not list"
    ]
    assert "pins has no sha256" in warning
    # An empty allow-list allows nothing.
    problems, _ = kr.check(sha, "", keyrings, [], "debian12/x86_64", "pins", "fprs")
    assert "fprs is empty: no key may be trusted" in problems


def test_an_extra_key_is_refused_even_when_pinned(tmp_path, keys):
    fpr, binary, _ = keys["trusted"]
    other_fpr, other, _ = keys["other"]
    deb = _deb(
        tmp_path,
        {
            "/usr/share/keyrings/cuda-archive-keyring.gpg": binary,
            "/etc/apt/trusted.gpg.d/extra.gpg": other,
        },
    )
    sha, keyrings = _read(deb)
    assert _check(sha, sha, keyrings, [fpr]) == [
        f"/etc/apt/trusted.gpg.d/extra.gpg holds key {other_fpr}, which fprs does not list"
    ]


def test_a_package_without_keys_is_refused(tmp_path):
    sha, keyrings = _read(_deb(tmp_path, {"/usr/share/doc/cuda-keyring/README": b"no key\n"}))
    assert _check(sha, sha, keyrings, ["A" * 40]) == ["the package holds no OpenPGP public key"]


def test_garbage_is_an_error():
    with pytest.raises(kr.KeyringError):
        kr.keyring_keys(b"\x00\x01not a key")
