"""How a newly installed NVIDIA driver gets loaded (module_utils gpuhost_driver_activation):
what holds the GPUs (sysfs fixture trees) and the modprobe / reboot / skip decision."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_driver_activation import (
    decide,
    gpu_holders,
    holding,
)

GPU = "0000:01:00.0"
FREE = {"bound": {GPU: ""}, "nouveau_loaded": False, "nvidia_loaded": False}
NOUVEAU = {"bound": {GPU: "nouveau"}, "nouveau_loaded": True, "nvidia_loaded": False}
OLD_NVIDIA = {
    "bound": {GPU: "nvidia"},
    "nouveau_loaded": False,
    "nvidia_loaded": True,
    "nvidia_version": "570.172.08",
    "nvidia_users": ["nvidia_modeset", "nvidia_uvm"],
}


def _decide(holders=NOUVEAU, **kw):
    args = dict(
        needed=True,
        policy="if_needed",
        serving=[],
        container=False,
        local=False,
        holders=holders,
    )
    args.update(kw)
    return decide(**args)


def test_nothing_to_do_when_the_installed_driver_runs():
    d = _decide(needed=False)
    assert d["action"] == "none" and not d["would_reboot"]


def test_blank_host_not_serving_is_rebooted():
    d = _decide()
    assert d["action"] == "reboot"
    assert "GPU 0000:01:00.0 is bound to nouveau" in d["reason"]
    assert "the nouveau module is loaded" in d["reason"]


def test_old_module_in_use_needs_a_reboot():
    d = _decide(holders=OLD_NVIDIA)
    assert d["action"] == "reboot"
    assert "nvidia module 570.172.08 is loaded, used by nvidia_modeset, nvidia_uvm" in d["reason"]


def test_serving_host_is_never_rebooted_without_always():
    d = _decide(serving=["sglang-server.service"])
    assert d["action"] == "skip" and d["would_reboot"]
    assert "sglang-server.service active" in d["reason"]
    assert "nvidia_driver_reboot=always" in d["reason"]
    assert _decide(serving=["sglang-server.service"], policy="always")["action"] == "reboot"


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"container": True}, "this is a container"),
        ({"local": True}, "the connection is local"),
        ({"policy": "never"}, "nvidia_driver_reboot=never"),
        ({"local": True, "policy": "always"}, "the connection is local"),
    ],
)
def test_would_reboot_but_may_not(kw, why):
    d = _decide(**kw)
    assert d["action"] == "skip" and d["would_reboot"]
    assert why in d["reason"]


def test_free_gpus_are_loaded_with_modprobe_whatever_the_policy():
    for policy in ("never", "if_needed", "always"):
        d = _decide(holders=FREE, policy=policy, serving=["sglang-server.service"])
        assert d["action"] == "load" and not d["would_reboot"], policy
    # A container never loads a module into the host's kernel.
    assert _decide(holders=FREE, container=True)["action"] == "skip"


def test_no_module_for_the_running_kernel_or_a_failed_load_falls_back_to_reboot():
    d = _decide(holders=FREE, module_available=False)
    assert d["action"] == "reboot" and "no nvidia module is built" in d["reason"]
    d = _decide(holders=FREE, load_failed="Key was rejected by service")
    assert d["action"] == "reboot" and "modprobe nvidia failed: Key was rejected" in d["reason"]
    assert _decide(holders=FREE, load_failed="x", policy="never")["action"] == "skip"


def test_vfio_or_nvidia_binding_is_not_a_holder():
    assert holding({"bound": {GPU: "vfio-pci", "0000:02:00.0": "nvidia"}}) == []


def test_bad_policy_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=r"nvidia_driver_reboot: got 'sometimes'; allowed"):
        _decide(policy="sometimes")


def _tree(tmp_path, driver="", nouveau=False, nvidia=None):
    dev = tmp_path / "sys/bus/pci/devices" / GPU
    dev.mkdir(parents=True)
    if driver:
        target = tmp_path / "sys/bus/pci/drivers" / driver
        target.mkdir(parents=True)
        os.symlink(target, dev / "driver")
    if nouveau:
        (tmp_path / "sys/module/nouveau").mkdir(parents=True)
    if nvidia:
        mod = tmp_path / "sys/module/nvidia"
        (mod / "holders" / "nvidia_uvm").mkdir(parents=True)
        (mod / "version").write_text(nvidia + "\n")
        (mod / "refcnt").write_text("3\n")
    return str(tmp_path)


def test_gpu_holders_from_sysfs(tmp_path):
    root = _tree(tmp_path / "a", driver="nouveau", nouveau=True)
    found = gpu_holders(root, [GPU])
    assert found["bound"] == {GPU: "nouveau"} and found["nouveau_loaded"]
    assert not found["nvidia_loaded"]

    root = _tree(tmp_path / "b", driver="nvidia", nvidia="570.172.08")
    found = gpu_holders(root, [GPU])
    assert found["nvidia_version"] == "570.172.08" and found["nvidia_refcnt"] == 3
    assert found["nvidia_users"] == ["nvidia_uvm"]

    found = gpu_holders(_tree(tmp_path / "c"), [GPU])
    assert holding(found) == []
