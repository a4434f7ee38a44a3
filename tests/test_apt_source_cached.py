"""cuda_repo refreshes apt's cache when its source is missing from it, not only when the
source file changed: a run interrupted between writing the source and `apt-get update` left
the next run with "No package matching 'nvidia-open'" (seen in tests/blank's interrupt test).
The decision is gpuhost.gpu.apt_source_cached over real `apt-cache policy` output."""

from __future__ import annotations

from ansible_collections.gpuhost.gpu.plugins.filter.gpuhost_nvidia_driver import (
    apt_source_cached,
)

# `apt-cache policy` on Debian 12 (a sandbox container with the stand-in repo read).
READ = """Package files:
 100 /var/lib/dpkg/status
     release a=now
 500 file:/srv/nvidia-standin/debian12/x86_64  Packages
     release o=gpuhost stand-in (TEST DOUBLE, not NVIDIA),l=gpuhost stand-in,c=
 500 https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages
     release o=NVIDIA,l=NVIDIA CUDA,c=
 500 http://deb.debian.org/debian bookworm/main amd64 Packages
     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64
     origin deb.debian.org
Pinned packages:
"""
# The same host after the source was written and the run interrupted before the refresh.
NOT_READ = """Package files:
 100 /var/lib/dpkg/status
     release a=now
 500 http://deb.debian.org/debian bookworm/main amd64 Packages
     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64
     origin deb.debian.org
Pinned packages:
"""


def test_a_source_apt_has_read_is_cached():
    assert apt_source_cached(READ, "file:///srv/nvidia-standin/debian12/x86_64/")
    assert apt_source_cached(
        READ, "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    )


def test_a_written_but_unread_source_is_not_cached():
    assert not apt_source_cached(NOT_READ, "file:///srv/nvidia-standin/debian12/x86_64/")
    assert not apt_source_cached(
        NOT_READ, "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    )


def test_another_directory_of_the_same_repository_is_not_ours():
    assert not apt_source_cached(
        READ, "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
    )
    assert not apt_source_cached(READ, "file:///srv/nvidia-standin/debian12/")
    assert not apt_source_cached("", "file:///srv/nvidia-standin/debian12/x86_64/")
