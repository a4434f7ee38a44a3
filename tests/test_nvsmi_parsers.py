"""nvidia-smi parsers and the gpuhost_gpu collector on recorded and documented-format output.

The machine is replaced by gpuhost_fakes.FakeProbe (a test double: no GPU is reachable in CI);
the parsers themselves are the product code.
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi import (
    NA,
    UNKNOWN,
    collect_gpu,
    driver_branch,
    module_from_license,
    parse_compute_caps,
    parse_proc_driver_version,
    parse_query_xml,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_nvsmi_topo import (
    parse_p2p_matrix,
    parse_topo_matrix,
    summarize_p2p,
    summarize_topology,
)
from ansible_collections.gpuhost.gpu.plugins.module_utils.gpuhost_pci_gpus import collect_pci_gpus
from gpuhost_fakes import FIXTURES, FakeProbe, load_fixture


def gpu_fact(name):
    probe = load_fixture(name)
    pci, pci_unknown = collect_pci_gpus(probe)
    fact = collect_gpu(probe, pci_devices=pci)
    fact["unknown"].update(pci_unknown)
    return fact


# ---------------------------------------------------------------- real 2x H200 capture


def test_h200_capture_full_fact():
    fact = gpu_fact("h200x2-nvlink-firecracker")
    assert fact["present"] is True
    assert fact["count"] == 2
    assert fact["driver"] == {
        "loaded": True,
        "version": "580.159.04",
        "branch": 580,
        "module": "open",
        "cuda_driver_version": "13.0",
    }
    gpu0 = fact["gpus"][0]
    assert gpu0["name"] == "NVIDIA H200"
    assert gpu0["uuid"] == "GPU-9a787c47-7c4b-cd4b-7432-3c0d3c794195"
    assert gpu0["pci_bus_id"] == "00000000:00:06.0"
    assert gpu0["compute_capability"] == "9.0"
    assert gpu0["memory_total_mib"] == 143771
    assert gpu0["bar1_total_mib"] == 262144
    assert gpu0["pcie"]["gen_max"] == 5 and gpu0["pcie"]["width_current"] == 16
    assert gpu0["pcie"]["degraded"] is False
    assert gpu0["persistence_mode"] is True
    assert gpu0["ecc"] == "enabled"
    assert gpu0["virtualization_mode"] == "Pass-Through"
    assert fact["topology"]["matrix"] == [["X", "NV18"], ["NV18", "X"]]
    assert fact["topology"]["nvlink"] is True
    assert fact["topology"]["worst_path"] == "NV18"
    assert fact["topology"]["numa_affinity"] == [0, 0]
    assert fact["p2p"] == {
        "read": [["X", "OK"], ["OK", "X"]],
        "write": [["X", "OK"], ["OK", "X"]],
        "all_ok": True,
        "status": "ok",
    }
    # No lspci in that VM: PCI names are unknown, with the reason.
    assert fact["unknown"] == {
        "pci_devices.0.name": "lspci not found",
        "pci_devices.1.name": "lspci not found",
    }
    json.dumps(fact)  # a fact must serialise


def sections(raw, *markers):
    """A recorded raw.txt cut at its section markers: the text before each, then the rest."""
    parts = []
    for marker in markers:
        head, raw = raw.split(marker, 1)
        parts.append(head)
    return [*parts, raw]


def test_real_device_run_raw_output_with_ansi_codes():
    """nvidia-smi 580 underlines topo headers with ESC[4m even into a pipe (real run)."""
    raw = (FIXTURES / "h200x2-real-preflight" / "raw.txt").read_text()
    assert "\x1b[4m" in raw
    topo, read, write, caps, _ = sections(raw, "==r\n", "==w\n", "==q\n", "==v\n")
    parsed = parse_topo_matrix(topo)
    assert parsed["labels"] == ["GPU0", "GPU1"]
    assert parsed["matrix"] == [["X", "NV18"], ["NV18", "X"]]
    assert parse_p2p_matrix(read) == [["X", "OK"], ["OK", "X"]]
    assert summarize_p2p(parse_p2p_matrix(read), parse_p2p_matrix(write))["status"] == "ok"
    assert parse_compute_caps(caps) == {"00000000:00:06.0": "9.0", "00000000:00:07.0": "9.0"}


def test_real_device_xml():
    xml = (FIXTURES / "h200x2-real-preflight" / "nvidia-smi-q.xml").read_text()
    parsed = parse_query_xml(xml)
    assert parsed["driver_version"].startswith("580.")
    assert [g["name"] for g in parsed["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]


# ---------------------------------------------------------------- documented-format fixtures


def test_rtx_pro_6000_vm_p2p_ns_and_one_degraded_link():
    fact = gpu_fact("rtx-pro-6000x8-proxmox-p2p-ns")
    assert fact["count"] == 8
    assert fact["driver"]["module"] == "open"
    assert {g["compute_capability"] for g in fact["gpus"]} == {"12.0"}
    assert {g["architecture"] for g in fact["gpus"]} == {"Blackwell"}
    degraded = [g["index"] for g in fact["gpus"] if g["pcie"]["degraded"]]
    assert degraded == [5]
    assert fact["gpus"][5]["pcie"]["degraded_reason"] == "width x8 of x16"
    # Idle at Gen1 of Gen5 is not degradation (docs/reference.md §5).
    assert fact["gpus"][0]["pcie"]["gen_current"] == 1
    assert fact["gpus"][0]["pcie"]["degraded"] is False
    assert fact["p2p"]["status"] == "none"
    assert fact["p2p"]["all_ok"] is False
    assert fact["topology"]["worst_path"] == "PHB"
    assert fact["topology"]["nvlink"] is False
    assert fact["topology"]["numa_affinity"] == [NA] * 8
    assert fact["gpus"][0]["ecc"] == "disabled"


def test_h100_nvswitch_nv18_everywhere_and_nics_dropped():
    fact = gpu_fact("h100x8-sxm-nvswitch")
    matrix = fact["topology"]["matrix"]
    assert len(matrix) == 8 and all(len(row) == 8 for row in matrix)
    assert all(matrix[i][j] == "NV18" for i in range(8) for j in range(8) if i != j)
    assert fact["topology"]["labels"] == [f"GPU{i}" for i in range(8)]
    assert fact["topology"]["numa_affinity"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert fact["topology"]["cpu_affinity"][4] == "56-111,168-223"
    assert fact["p2p"]["status"] == "ok"
    assert fact["driver"]["module"] == "proprietary"
    assert fact["driver"]["branch"] == 535


def test_l40s_two_numa_nodes_partial_p2p_and_older_columns():
    fact = gpu_fact("l40sx4-pcie-two-numa")
    assert fact["topology"]["matrix"][0] == ["X", "NODE", "SYS", "SYS"]
    assert fact["topology"]["matrix"][2] == ["SYS", "SYS", "X", "NODE"]
    assert fact["topology"]["worst_path"] == "SYS"
    assert fact["topology"]["numa_affinity"] == [0, 0, 1, 1]
    assert fact["p2p"]["status"] == "partial"
    assert fact["p2p"]["read"][0] == ["X", "OK", "CNS", "CNS"]
    assert fact["gpus"][0]["persistence_mode"] is False
    assert fact["gpus"][0]["compute_capability"] == "8.9"


def test_no_driver_reports_pci_gpus_and_reasons():
    fact = gpu_fact("no-driver-rtx-pro-6000x8")
    assert fact["present"] is True
    assert fact["driver"]["loaded"] is False
    assert fact["gpus"] == []
    assert fact["count"] == 8
    assert fact["driver"]["version"] == UNKNOWN
    assert fact["unknown"]["driver.version"] == "nvidia-smi not found"
    assert "modinfo not found" in fact["unknown"]["driver.module"]
    assert fact["p2p"]["status"] == UNKNOWN
    assert {d["kernel_driver"] for d in fact["pci_devices"]} == {"none"}
    assert "RTX PRO 6000" in fact["pci_devices"][0]["name"]


def test_nothing_at_all():
    fact = collect_gpu(FakeProbe(dirs={"/sys/bus/pci/devices": []}), pci_devices=[])
    assert fact["present"] is False and fact["count"] == 0
    assert fact["unknown"]["gpus"] == "nvidia-smi not found"


# ---------------------------------------------------------------- robustness


def test_nvidia_smi_fails_with_driver_loaded_reads_proc_version():
    probe = FakeProbe(
        files={
            "/proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module "
            "for x86_64  575.57.08  Release Build\n"
        },
        commands={
            ("nvidia-smi", "-q", "-x"): (
                9,
                "",
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            )
        },
    )
    fact = collect_gpu(probe, pci_devices=[{"bus_id": "0000:01:00.0"}])
    assert fact["driver"]["loaded"] is False
    assert fact["driver"]["version"] == "575.57.08"
    assert fact["driver"]["module"] == "open"
    assert fact["unknown"]["gpus"].startswith("nvidia-smi exited 9: NVIDIA-SMI has failed")
    assert fact["count"] == 1


def test_garbage_xml_is_a_reason_not_a_crash():
    probe = FakeProbe(commands={("nvidia-smi", "-q", "-x"): (0, "<nvidia_smi_log><gpu", "")})
    fact = collect_gpu(probe)
    assert "not XML" in fact["unknown"]["gpus"]


def test_topo_failure_keeps_gpus():
    xml = (FIXTURES / "h200x2-nvlink-firecracker" / "nvidia-smi-q.xml").read_text()
    probe = FakeProbe(
        commands={
            ("nvidia-smi", "-q", "-x"): (0, xml, ""),
            ("nvidia-smi", "topo", "-m"): (124, "", "nvidia-smi timed out after 30s"),
        }
    )
    fact = collect_gpu(probe)
    assert fact["count"] == 2
    assert fact["unknown"]["topology"] == "nvidia-smi exited 124: nvidia-smi timed out after 30s"
    assert fact["p2p"]["status"] == UNKNOWN
    assert fact["gpus"][0]["compute_capability"] == UNKNOWN
    assert "gpus.0.compute_capability" in fact["unknown"]


def test_na_fields_in_xml_become_unknown_with_reason():
    xml = """<nvidia_smi_log><driver_version>570.1</driver_version><cuda_version>N/A</cuda_version>
    <gpu id="00000000:01:00.0"><product_name>NVIDIA GeForce RTX 4090</product_name>
    <persistence_mode>N/A</persistence_mode><ecc_mode><current_ecc>N/A</current_ecc></ecc_mode>
    <pci><pci_gpu_link_info><pcie_gen><max_link_gen>N/A</max_link_gen></pcie_gen></pci_gpu_link_info>
    </pci></gpu></nvidia_smi_log>"""
    parsed = parse_query_xml(xml)
    gpu = parsed["gpus"][0]
    assert gpu["ecc"] == NA  # consumer card: ECC does not exist
    assert gpu["persistence_mode"] == UNKNOWN
    assert gpu["pcie"]["gen_max"] == UNKNOWN
    assert gpu["memory_total_mib"] == UNKNOWN
    assert gpu["pci_bus_id"] == "00000000:01:00.0"  # from the id attribute
    assert "driver.cuda_driver_version" in parsed["unknown"]
    assert "gpus.0.pcie.gen_max" in parsed["unknown"]
    assert gpu["pcie"]["degraded"] is False


def test_gen_capped_by_slot_is_degraded():
    xml = (FIXTURES / "h200x2-nvlink-firecracker" / "nvidia-smi-q.xml").read_text()
    xml = xml.replace("<max_link_gen>5</max_link_gen>", "<max_link_gen>4</max_link_gen>", 1)
    gpu = parse_query_xml(xml)["gpus"][0]
    assert gpu["pcie"]["degraded"] is True
    assert gpu["pcie"]["degraded_reason"] == "link capped at Gen4, GPU can do Gen5"


@pytest.mark.parametrize("text", ["", "Legend:\n  X = Self\n", "garbage\n"])
def test_unparsable_matrices_raise_valueerror(text):
    with pytest.raises(ValueError):
        parse_p2p_matrix(text)
    with pytest.raises(ValueError):
        parse_topo_matrix(text)


def test_p2p_unknown_code_maps_to_u():
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tWEIRD\t\n GPU1\tOK\tX\t\n"
    assert parse_p2p_matrix(text) == [["X", "U"], ["OK", "X"]]


def test_summaries():
    assert summarize_p2p([["X"]], [["X"]]) == {"all_ok": False, "status": NA}
    assert summarize_p2p([["X", "OK"], ["OK", "X"]], [["X", "NS"], ["NS", "X"]])["status"] == "none"
    assert summarize_topology([["X", "NV4", "PIX"], ["NV4", "X", "PXB"], ["PIX", "PXB", "X"]]) == {
        "nvlink": True,
        "worst_path": "PXB",
    }
    assert summarize_topology([["X", "NV18"], ["NV4", "X"]])["worst_path"] == "NV4"
    assert summarize_topology([["X", "??"], ["??", "X"]])["worst_path"] == UNKNOWN


def test_driver_flavour_strings():
    assert parse_proc_driver_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
    ) == {"module": "proprietary", "version": "550.54.15"}
    assert parse_proc_driver_version("")["module"] == UNKNOWN
    assert module_from_license("Dual MIT/GPL\n") == "open"
    assert module_from_license("NVIDIA") == "proprietary"
    assert module_from_license("GPL") == UNKNOWN
    assert driver_branch("580.159.04") == 580
    assert driver_branch("garbage") == UNKNOWN


def test_real_single_gpu_raw_output():
    """The 1x H200 machine (device kind nvidia-h200): topo -m has a `GPU NUMA ID` column and a
    one-cell matrix, the P2P tables hold only X, and the headers carry ANSI codes too."""
    raw = (FIXTURES / "h200x1-real" / "raw.txt").read_text()
    assert "\x1b[4m" in raw
    topo, read, write, caps, _ = sections(
        raw,
        "== nvidia-smi topo -p2p r\n",
        "== nvidia-smi topo -p2p w\n",
        "== --query-gpu\n",
        "== nvlink -s\n",
    )
    parsed = parse_topo_matrix(topo.split("\n", 1)[1])
    assert parsed["labels"] == ["GPU0"]
    assert parsed["matrix"] == [["X"]]
    assert parse_p2p_matrix(read) == [["X"]] == parse_p2p_matrix(write)
    assert summarize_p2p(parse_p2p_matrix(read), parse_p2p_matrix(write))["status"] == "n/a"
    assert parse_compute_caps(caps) == {"00000000:00:06.0": "9.0"}
    parsed = parse_query_xml((FIXTURES / "h200x1-real" / "nvidia-smi-q.xml").read_text())
    assert [g["name"] for g in parsed["gpus"]] == ["NVIDIA H200"]
