"""The one reader of the Secure Boot state, for every role (preflight's gpu_facts and the
nvidia_driver probe both call read_secure_boot).

Sources, in order:

1. The SecureBoot UEFI variable through efivarfs. Firmware publishes it under the EFI global
   variable GUID 8be4df61-93ca-11d2-aa0d-00e098032b8c (UEFI specification, "Globally Defined
   Variables"; the Linux kernel's EFI_GLOBAL_VARIABLE_GUID in include/linux/efi.h). efivarfs
   shows a variable as the file <Name>-<GUID> whose first 4 bytes are the variable's
   attributes (little endian) and the rest its data (kernel Documentation/filesystems/
   efivarfs.rst); SecureBoot's data is one byte, 1 = on, 0 = off.
2. No /sys/firmware/efi: a legacy-BIOS or direct kernel boot, which has no Secure Boot.
3. `mokutil --sb-state` (it reads the same variable; useful where efivarfs is not mounted).
4. Otherwise unknown, and the source says why.
"""

from __future__ import annotations

EFI_GLOBAL_VARIABLE_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SECURE_BOOT_EFIVAR = f"/sys/firmware/efi/efivars/SecureBoot-{EFI_GLOBAL_VARIABLE_GUID}"
EFI_DIR = "/sys/firmware/efi"

ENABLED, DISABLED, UNKNOWN = "enabled", "disabled", "unknown"


def parse_efivar(data: bytes | None) -> str | None:
    """efivarfs bytes (4 attribute bytes + 1 data byte) -> enabled | disabled | None."""
    if data is None or len(data) < 5:
        return None
    return ENABLED if data[4] == 1 else DISABLED


def parse_mokutil(text: str | None) -> str | None:
    """`mokutil --sb-state` -> enabled | disabled | None (no answer)."""
    lowered = (text or "").lower()
    if "secureboot enabled" in lowered:
        return ENABLED
    if "secureboot disabled" in lowered or "not supported" in lowered:
        return DISABLED
    return None


def read_secure_boot(read_bytes, efi_present: bool, run_mokutil, efivar: str = SECURE_BOOT_EFIVAR):
    """{state: enabled|disabled|unknown, source} from the machine.

    read_bytes(path) -> bytes | None reads a file (callers root it where tests need);
    efi_present: /sys/firmware/efi exists; run_mokutil() -> stdout | None, called only when
    the variable cannot be read. efivar: the variable's file, SECURE_BOOT_EFIVAR on a real
    host (the nvidia_driver role's test seam points it at a fixture).
    """
    state = parse_efivar(read_bytes(efivar))
    if state:
        return {"state": state, "source": efivar}
    if not efi_present:
        return {"state": DISABLED, "source": f"no {EFI_DIR} (BIOS or direct kernel boot)"}
    state = parse_mokutil(run_mokutil())
    if state:
        return {"state": state, "source": "mokutil --sb-state"}
    return {
        "state": UNKNOWN,
        "source": f"EFI boot, {efivar} not readable and mokutil not found or without an answer",
    }
