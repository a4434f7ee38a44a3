"""The CUDA toolkits under a directory and their releases, in one call for role cuda_toolkit
(plugins/module_utils/gpuhost_cuda_toolkits.py, run by module nvidia_driver_probe's
cuda_toolkits_in; issue 29 item 6). It replaces a find, a looped stat and a looped command,
so it must see what they saw: cuda-* directories (not links) with a bin/nvcc."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_cuda_toolkits as ct

# nvcc --version of the H200 machine's CUDA 13.0 (README.md of role cuda_toolkit).
NVCC_13 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
    "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n"
)


class FakeNvcc:
    """Test double of module.run_command: answers per nvcc path, records the calls."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answers[argv[0]]


def _toolkit(parent, name, nvcc=True):
    home = parent / name
    (home / "bin").mkdir(parents=True)
    if nvcc:
        (home / "bin" / "nvcc").write_text("")
    return str(home)


def test_each_toolkit_with_a_compiler_and_its_release(tmp_path):
    new = _toolkit(tmp_path, "cuda-13.0")
    old = _toolkit(tmp_path, "cuda-12.8")
    _toolkit(tmp_path, "cuda-12.4", nvcc=False)  # a leftover without its compiler
    _toolkit(tmp_path, "lib")  # not cuda-*
    os.symlink(new, tmp_path / "cuda")  # the alternatives link: not cuda-*
    os.symlink(new, tmp_path / "cuda-13")  # a link is not a toolkit directory (find did not)
    run = FakeNvcc(
        {
            f"{new}/bin/nvcc": (0, NVCC_13, ""),
            f"{old}/bin/nvcc": (0, "Cuda compilation tools, release 12.8, V12.8.93\n", ""),
        }
    )
    assert ct.toolkits(str(tmp_path), run) == [
        {"path": old, "version": "12.8"},
        {"path": new, "version": "13.0"},
    ]
    assert run.calls == [[f"{old}/bin/nvcc", "--version"], [f"{new}/bin/nvcc", "--version"]]


def test_a_compiler_that_does_not_say_its_release_is_unknown(tmp_path):
    home = _toolkit(tmp_path, "cuda-12.8")
    got = ct.toolkits(str(tmp_path), FakeNvcc({f"{home}/bin/nvcc": (0, "something else", "")}))
    assert got == [{"path": home, "version": "unknown"}]


def test_a_compiler_that_fails_stops_the_role_naming_it(tmp_path):
    home = _toolkit(tmp_path, "cuda-12.8")
    run = FakeNvcc({f"{home}/bin/nvcc": (126, "", "cannot execute binary file\n")})
    with pytest.raises(ct.ToolkitError, match=r"cuda-12\.8/bin/nvcc --version failed \(rc 126\)"):
        ct.toolkits(str(tmp_path), run)


def test_no_directory_no_toolkits(tmp_path):
    assert ct.toolkits(str(tmp_path / "absent"), FakeNvcc({})) == []
