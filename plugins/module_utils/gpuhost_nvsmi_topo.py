# Parsers for the `nvidia-smi topo` matrices and their summaries: the `topology` and `p2p`
# parts of the `gpuhost_gpu` fact (schema: docs/facts.md). gpuhost_nvsmi.collect_gpu runs the
# commands and puts the results in the fact; everything here is pure (text in, data out).
#
# Formats relied on (docs/reference.md §5; NVIDIA nvidia-smi(1)):
#   nvidia-smi topo -m          tab-separated matrix, legend X SYS NODE PHB PXB PIX NV#
#   nvidia-smi topo -p2p r|w    tab-separated matrix, legend X OK CNS GNS TNS NS U

from __future__ import annotations

import re

# The placeholders of the gpuhost_gpu fact (docs/facts.md). Defined here, in the file that
# imports no sibling, and imported from here by gpuhost_nvsmi.
UNKNOWN = "unknown"
NA = "n/a"

# NCCL's path ranking, best first (NVIDIA/nccl src/graph/paths.cc; docs/reference.md §4). NV# is
# ranked as one class: any NVLink bond beats any PCIe path.
PATH_RANK = {"X": -1, "NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
P2P_CODES = ("X", "OK", "CNS", "GNS", "TNS", "NS", "U")


def _split_row(line):
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return [cell.strip() for cell in re.split(r"\s{2,}", line.strip())]


# nvidia-smi 580 underlines the topo header with ANSI SGR codes even when stdout is a pipe
# (seen on the real 2x H200 run, tests/fixtures/gpu-hosts/h200x2-real-preflight/raw.txt).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _table_lines(text):
    """Lines of the matrix: everything before the 'Legend' block, ANSI codes removed."""
    lines = []
    for line in _ANSI.sub("", text or "").splitlines():
        if line.strip().startswith("Legend") or line.strip().startswith("NIC Legend"):
            break
        if line.strip():
            lines.append(line)
    return lines


def parse_topo_matrix(text):
    """Parse `nvidia-smi topo -m` into GPU labels, the GPU x GPU matrix and affinities.

    NIC rows and columns (NIC0, mlx5_0) are dropped: the fact is about GPU pairs. Columns
    after the matrix are matched by header name, so the extra empty cell some driver
    versions print before 'GPU NUMA ID' does not shift them.
    """
    lines = _table_lines(text)
    if not lines:
        raise ValueError("no matrix found in nvidia-smi topo -m output")
    header = [cell for cell in _split_row(lines[0]) if cell]
    device_cols = [h for h in header if re.fullmatch(r"(GPU\d+|NIC\d+|mlx\S+)", h)]
    extra_cols = header[len(device_cols) :]
    gpu_labels = [h for h in device_cols if h.startswith("GPU")]
    if not gpu_labels:
        raise ValueError(f"no GPU labels in the topo -m header: {lines[0]!r}")
    rows = {}
    extras = {}
    for line in lines[1:]:
        cells = _split_row(line)
        label = cells[0]
        if not re.fullmatch(r"GPU\d+", label):
            continue
        values = cells[1 : 1 + len(device_cols)]
        rest = [c for c in cells[1 + len(device_cols) :] if c]
        rows[label] = dict(zip(device_cols, values, strict=False))
        extras[label] = dict(zip(extra_cols, rest, strict=False))
    matrix = [[rows.get(r, {}).get(c, "U") or "U" for c in gpu_labels] for r in gpu_labels]
    cpu_affinity = [extras.get(r, {}).get("CPU Affinity", NA) for r in gpu_labels]
    numa = []
    for r in gpu_labels:
        value = extras.get(r, {}).get("NUMA Affinity", NA)
        numa.append(int(value) if value.isdigit() else NA)
    return {
        "labels": gpu_labels,
        "matrix": matrix,
        "cpu_affinity": [c if c not in ("N/A", "") else NA for c in cpu_affinity],
        "numa_affinity": numa,
    }


def path_class(cell):
    """'NV18' -> 'NV'; 'SYS' -> 'SYS'; unknown codes -> None."""
    if re.fullmatch(r"NV\d+", cell):
        return "NV"
    return cell if cell in PATH_RANK else None


def summarize_topology(matrix):
    """NVLink presence and the worst pair type, NCCL-ranked (docs/facts.md)."""
    cells = [cell for i, row in enumerate(matrix) for j, cell in enumerate(row) if i != j]
    nvlink = any(path_class(c) == "NV" for c in cells)
    known = [c for c in cells if path_class(c) is not None]
    if not cells:
        worst = NA
    elif len(known) < len(cells):
        worst = UNKNOWN
    else:
        worst = max(known, key=lambda c: (PATH_RANK[path_class(c)], -_nv_links(c)))
    return {"nvlink": nvlink, "worst_path": worst}


def _nv_links(cell):
    match = re.fullmatch(r"NV(\d+)", cell)
    return int(match.group(1)) if match else 0


def parse_p2p_matrix(text):
    """Parse `nvidia-smi topo -p2p r|w` into a GPU x GPU list of codes."""
    lines = _table_lines(text)
    if not lines:
        raise ValueError("no matrix found in nvidia-smi topo -p2p output")
    header = [cell for cell in _split_row(lines[0]) if cell]
    labels = [h for h in header if re.fullmatch(r"GPU\d+", h)]
    if not labels:
        raise ValueError(f"no GPU labels in the topo -p2p header: {lines[0]!r}")
    rows = {}
    for line in lines[1:]:
        cells = [c for c in _split_row(line) if c]
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            rows[cells[0]] = cells[1 : 1 + len(labels)]
    matrix = []
    for label in labels:
        row = rows.get(label, [])
        row = row + ["U"] * (len(labels) - len(row))
        matrix.append([c if c in P2P_CODES else "U" for c in row])
    return matrix


def summarize_p2p(read, write):
    """all_ok and status over the off-diagonal pairs of the read and write matrices."""
    n = len(read)
    if n < 2:
        return {"all_ok": False, "status": NA}
    if len(write) != n:
        return {"all_ok": False, "status": UNKNOWN}
    pairs = [
        read[i][j] == "OK" and write[i][j] == "OK" for i in range(n) for j in range(n) if i != j
    ]
    if all(pairs):
        return {"all_ok": True, "status": "ok"}
    if any(pairs):
        return {"all_ok": False, "status": "partial"}
    return {"all_ok": False, "status": "none"}
