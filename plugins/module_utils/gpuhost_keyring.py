"""Which OpenPGP keys a keyring file holds, and is a keyring package the pinned one?

Pure code behind the `deb_keyring` module, which role cuda_repo runs on NVIDIA's cuda-keyring
.deb before installing it: every primary key the package would make apt trust must carry a
fingerprint the inventory allows (always), and the file's sha256 must be the pinned one when
one is pinned for that repository directory. With no pin the check goes on with a warning
that names the pin variable and the file's sha256: a first install from NVIDIA's repository
needs no pin recorded beforehand, and the key check still holds.

Fingerprints are computed as OpenPGP defines them (RFC 4880 section 12.2 for version 4 keys:
SHA-1 over 0x99, the two-octet length of the public-key packet body and the body; RFC 9580
section 5.5.4 for version 6: SHA-256 over 0x9b, a four-octet length and the body), the same
value `gpg --with-colons --show-keys` prints on its fpr lines. Packet framing: RFC 4880
section 4.2 (old and new format headers).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import tarfile

PUBLIC_KEY, PUBLIC_SUBKEY = 6, 14
# Where a package puts keys apt may trust (Signed-By keyrings, the trusted.gpg.d drop-ins).
KEYRING_DIRS = ("usr/share/keyrings/", "etc/apt/keyrings/", "etc/apt/trusted.gpg.d/")
_ARMOR = re.compile(
    rb"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(?P<body>.*?)-----END PGP PUBLIC KEY BLOCK-----",
    re.S,
)


class KeyringError(ValueError):
    """The bytes are not an OpenPGP keyring this code can read."""


def normalize_fingerprint(text: str) -> str:
    return re.sub(r"\s+", "", str(text)).upper()


def dearmor(data: bytes) -> bytes:
    """ASCII-armored key blocks -> binary packets; binary input is returned as it is."""
    blocks = _ARMOR.findall(data)
    if not blocks:
        return data
    out = b""
    for body in blocks:
        lines = body.splitlines()
        # Armor headers ("Version: ...") end at the first empty line; a block may have none.
        if b"" in [line.strip() for line in lines]:
            lines = lines[[line.strip() for line in lines].index(b"") + 1 :]
        payload = b"".join(
            line.strip() for line in lines if line.strip() and not line.startswith(b"=")
        )
        try:
            out += base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise KeyringError(f"bad base64 in an armored key block: {exc}") from exc
    return out


def packets(data: bytes):
    """Yield (tag, body) for each OpenPGP packet in binary data."""
    pos = 0
    while pos < len(data):
        first = data[pos]
        if not first & 0x80:
            raise KeyringError(f"not an OpenPGP packet at byte {pos}")
        if first & 0x40:  # new format
            tag = first & 0x3F
            pos += 1
            if pos >= len(data):
                raise KeyringError("truncated packet header")
            octet = data[pos]
            if octet < 192:
                length, pos = octet, pos + 1
            elif octet < 224:
                if pos + 1 >= len(data):
                    raise KeyringError("truncated packet length")
                length, pos = ((octet - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif octet == 255:
                length, pos = int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5
            else:
                raise KeyringError("partial body lengths do not occur in key packets")
        else:  # old format
            tag = (first >> 2) & 0x0F
            kind = first & 0x03
            pos += 1
            if kind == 3:
                length = len(data) - pos
            else:
                size = (1, 2, 4)[kind]
                length, pos = int.from_bytes(data[pos : pos + size], "big"), pos + size
        body = data[pos : pos + length]
        if len(body) != length:
            raise KeyringError("truncated packet body")
        pos += length
        yield tag, body


def fingerprint(body: bytes) -> str | None:
    """The fingerprint of a public-key or public-subkey packet body (v4 and v6 keys)."""
    if not body:
        return None
    version = body[0]
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    return None  # v3 (MD5-based) keys are not accepted anywhere any more


def keyring_keys(data: bytes) -> dict:
    """{primary: [fingerprints], subkeys: [fingerprints]} of a keyring file's bytes."""
    primary, subkeys = [], []
    for tag, body in packets(dearmor(data)):
        if tag in (PUBLIC_KEY, PUBLIC_SUBKEY):
            value = fingerprint(body)
            if value is None:
                raise KeyringError(f"unsupported key version {body[:1].hex() or 'none'}")
            (primary if tag == PUBLIC_KEY else subkeys).append(value)
    return {"primary": primary, "subkeys": subkeys}


def keyrings_in_tar(tar_bytes: bytes) -> dict[str, dict]:
    """{/path: keyring_keys} for the keyring files in a package's data (dpkg-deb --fsys-tarfile)."""
    keyrings = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            for member in tar.getmembers():
                name = member.name[2:] if member.name.startswith("./") else member.name
                if member.isfile() and name.startswith(KEYRING_DIRS):
                    keyrings["/" + name] = keyring_keys(tar.extractfile(member).read())
    except tarfile.TarError as exc:
        raise KeyringError(f"not a package data archive: {exc}") from exc
    return keyrings


def check(
    sha256: str,
    pinned_sha256: str,
    keyrings: dict[str, dict],
    allowed: list[str],
    where: str,
    sha_var: str,
    fpr_var: str,
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a keyring package; no problems when it may be installed.

    keyrings: {file in the package: keyring_keys(...)}; where: the pin's key in sha_var
    (e.g. "debian12/x86_64"). The key fingerprints are always checked; the sha256 only when
    pinned_sha256 is set (otherwise a warning names sha_var, `where` and the file's sha256).
    """
    problems, warnings = [], []
    pinned = (pinned_sha256 or "").strip().lower()
    if not pinned:
        warnings.append(
            f"{sha_var} has no sha256 for {where!r}, so the keyring package's sha256 was not "
            f"checked (its keys were). This file's sha256 is {sha256}: check it against a copy "
            f"fetched another way, then pin it: {sha_var}: {{{where!r}: '{sha256}'}}"
        )
    elif pinned != sha256:
        problems.append(f"sha256 {sha256} is not the one pinned in {sha_var}[{where!r}] ({pinned})")
    wanted = {normalize_fingerprint(f) for f in allowed}
    if not wanted:
        problems.append(f"{fpr_var} is empty: no key may be trusted")
    found = [(name, fpr) for name, keys in sorted(keyrings.items()) for fpr in keys["primary"]]
    if not found:
        problems.append("the package holds no OpenPGP public key")
    for name, fpr in found:
        if fpr not in wanted:
            problems.append(f"{name} holds key {fpr}, which {fpr_var} does not list")
    return problems, warnings
