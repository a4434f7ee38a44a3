"""bench_serving parsing, the baseline check, the plot, and the report (src/gpuhost/bench.py,
report.py, runfacts.py, results.py; plugins/module_utils/gpuhost_bench_serving.py).

Fixtures: tests/fixtures/bench_serving/ (see its README.md): one file constructed from the
documented fields (docs/reference.md §3), one real output of sglang.bench_serving run against the
SGLang stand-in (a test double).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuhost.gpu.plugins.module_utils import gpuhost_bench_serving as bs

from gpuhost import bench, redaction, report, results, runfacts
from gpuhost.cli import main

ROOT = Path(__file__).resolve().parents[1]


FIXTURES = ROOT / "tests" / "fixtures" / "bench_serving"
CONSTRUCTED = FIXTURES / "glm5-8x-rtx-pro-6000-constructed.jsonl"
REAL = FIXTURES / "standin-real-client-0.5.10.post1.jsonl"
PROFILE = ROOT / "profiles" / "glm5-nvfp4-8x-rtx-pro-6000.yml"
FIXTURE_KEY = "sk-fixture-secret-0123456789"
HF_TOKEN = "hf_TESTtokenNEVERinREPORT42"
API_KEY = "sk-api-key-never-in-report-77"


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def baseline() -> dict:
    return yaml.safe_load(PROFILE.read_text())["expected_baseline"]


# --- parsing -----------------------------------------------------------------------------
def test_parse_constructed_lines():
    points = bench.parse_lines(read_lines(CONSTRUCTED))
    assert [p.concurrency for p in points] == [1, 8, 16, 32, 64]
    first = points[0]
    assert (first.input_len, first.output_len, first.num_prompts) == (256, 256, 8)
    assert first.output_tok_s == 11.0 and first.total_tok_s == 22.0
    assert first.median_ttft_ms == 450.0 and first.median_itl_ms == 88.0
    assert first.mean_e2e_s == pytest.approx(23.7, abs=0.1)
    assert points[-1].row()[:2] == ["64", "210.0"]


def test_parse_real_client_output_with_infinity():
    lines = read_lines(REAL)
    assert lines[0]["request_rate"] == float("inf")  # as bench_serving writes it
    points = bench.parse_lines(lines)
    assert [p.concurrency for p in points] == [1, 8, 16]
    assert all(p.output_tok_s > 0 and p.completed == p.num_prompts for p in points)
    assert {(p.input_len, p.output_len) for p in points} == {(64, 32)}


def test_a_line_without_metrics_is_an_error():
    line = read_lines(CONSTRUCTED)[0]
    del line["median_itl_ms"]
    with pytest.raises(bench.BenchParseError, match="median_itl_ms"):
        bench.parse_line(line)
    with pytest.raises(bench.BenchParseError, match="max_concurrency"):
        bench.parse_line({"output_throughput": 1.0})


def test_later_line_for_a_level_wins():
    lines = read_lines(CONSTRUCTED)[:1]
    again = dict(lines[0], output_throughput=12.5)
    assert bench.parse_lines([lines[0], again])[0].output_tok_s == 12.5


# --- the host side: command and scrub ---------------------------------------------------
def test_command_has_the_documented_flags_and_no_key():
    params = {
        "host": "127.0.0.1",
        "port": 30000,
        "model": "lukealonso/GLM-5-NVFP4",
        "served_model_name": "glm-5",
        "tokenizer": "",
        "input_len": 256,
        "output_len": 256,
        "range_ratio": 1.0,
        "num_prompts": 32,
        "concurrency": 8,
        "seed": 1,
        "output_file": "/tmp/x.jsonl",
        "api_key": API_KEY,
    }
    argv = bs.command("/opt/gpuhost/venv/bin/python", params)
    text = " ".join(argv)
    for part in (
        "-m sglang.bench_serving",
        "--backend sglang-oai",
        "--dataset-name random-ids",
        "--model lukealonso/GLM-5-NVFP4",
        "--port 30000",
        "--max-concurrency 8",
        "--num-prompts 32",
        "--random-input-len 256",
        "--random-output-len 256",
        "--output-file /tmp/x.jsonl",
        "--served-model-name glm-5",
    ):
        assert part in text
    assert API_KEY not in text and "--tokenizer" not in argv


def test_scrub_drops_the_server_key_and_infinity():
    clean = bs.scrub(read_lines(CONSTRUCTED)[0])
    assert FIXTURE_KEY not in json.dumps(clean)
    assert clean["server_info"] == {
        "version": "0.5.10.post1",
        "served_model_name": "glm-5",
        "tp_size": 8,
    }
    assert clean["request_rate"] == "inf"
    json.loads(json.dumps(clean, allow_nan=False))  # strict JSON now
    assert bs.redact({"nested": {"hf_token": "x"}}) == {"nested": {"hf_token": "<redacted>"}}


# --- the baseline check: each side of the 10% line ---------------------------------------
def point_at(concurrency: int, output_tok_s: float) -> bench.Point:
    return bench.Point(
        concurrency, 256, 256, 256, 256, output_tok_s, 2 * output_tok_s, 1.0, 1.0, 1.0, 1.0
    )


@pytest.mark.parametrize(
    ("measured", "regression"),
    [
        (210.0, False),
        (189.21, False),
        (189.0, False),
        (188.79, True),
        (150.0, True),
        (260.0, False),
    ],
)
def test_regression_line_at_ten_percent(measured, regression):
    # Profile baseline at 64 concurrent, 256/256: 210 output tok/s; 10% below is 189.
    [c] = bench.compare([point_at(64, measured)], baseline())
    assert c.expected == 210.0 and c.expected_range == (195.0, 225.0)
    assert c.regression is regression


def test_just_inside_and_just_outside_ten_percent():
    ref = {
        "points": [{"concurrency": 1, "input_len": 256, "output_len": 256, "output_tok_s": 100.0}]
    }
    [inside] = bench.compare([point_at(1, 90.1)], ref)  # -9.9%
    [outside] = bench.compare([point_at(1, 89.9)], ref)  # -10.1%
    assert not inside.regression and outside.regression
    assert bench.comparison_row(outside)[-2:] == ["-10.1%", "REGRESSION"]


def test_no_baseline_point_for_other_lengths():
    other = bench.Point(64, 128, 128, 256, 256, 100.0, 200.0, 1.0, 1.0, 1.0, 1.0)
    assert bench.compare([other], baseline()) == []
    assert bench.compare([point_at(64, 1.0)], {}) == []


# --- plot ------------------------------------------------------------------------------
def test_plot_is_a_png(tmp_path):
    points = bench.parse_lines(read_lines(CONSTRUCTED))
    path = bench.plot({"gpu-host": points}, tmp_path / "bench.png", baseline())
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# --- report ----------------------------------------------------------------------------
def gpu_fact() -> dict:
    return {
        "present": True,
        "count": 8,
        "driver": {
            "loaded": True,
            "version": "580.95.05",
            "module": "open",
            "cuda_driver_version": "13.0",
        },
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "architecture": "Blackwell",
                "compute_capability": "12.0",
                "memory_total_mib": 97887,
                "bar1_total_mib": 131072,
                "pcie": {"gen_max": 5, "width_max": 16, "degraded": False},
            }
            for i in range(8)
        ],
        "topology": {"worst_path": "SYS"},
        "p2p": {"status": "none"},
    }


def make_run(
    root: Path,
    name: str,
    *,
    command: str = "bench",
    lines: list[dict] | None = None,
    facts: dict | None = None,
    output_scale: float = 1.0,
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    lines = read_lines(CONSTRUCTED) if lines is None else lines
    lines = [
        dict(bs.scrub(line), output_throughput=line["output_throughput"] * output_scale)
        for line in lines
    ]
    host_facts = {
        "gpuhost_bench": {
            "model": "lukealonso/GLM-5-NVFP4",
            "results": lines,
            "baseline": baseline(),
        },
        "gpuhost_verify": {
            "base_url": "http://127.0.0.1:30000",
            "served_model_name": "glm-5",
            "server": {"version": "0.0.0+standin", "standin": True},
            "ttft_ms": 12.5,
            "passed": True,
            "findings": [{"check": "verify.health", "status": "pass", "message": "ok"}],
            "questions": [
                {"prompt": "What is 17 + 25?", "expected": "42", "got": "42", "passed": True}
            ],
        },
        "gpuhost_nccl": {
            "topology_class": "pcie-no-p2p",
            "nccl_version": "2.27.5",
            "env": {
                "NCCL_IB_DISABLE": "1",
                "NCCL_MIN_NCHANNELS": "8",
                "NCCL_SECRET_TOKEN": "nccl-secret-value",
            },
            "disable_custom_all_reduce": True,
            "reasons": [
                {
                    "variable": "NCCL_P2P_LEVEL",
                    "value": None,
                    "reason": "no P2P: the level does nothing",
                    "source": "facts",
                }
            ],
        },
        "gpuhost_sglang": {
            "profile": "glm5-nvfp4-8x-rtx-pro-6000",
            "model": "lukealonso/GLM-5-NVFP4",
            "served_model_name": "glm-5",
            "tp_size": 8,
            "host": "127.0.0.1",
            "port": 30000,
            "api_key_set": True,
            "sglang_version": "0.5.10.post1",
            "flags": {"--kv-cache-dtype": "bf16", "--tp-size": 8},
            "warnings": [f"a warning that quotes {HF_TOKEN} by accident"],
        },
        "gpuhost_python_env": {
            "versions": {"sglang": "0.5.10.post1", "torch": "2.9.1"},
            "env": {"HF_TOKEN": HF_TOKEN},
        },
    }
    host_facts.update(facts or {})
    rep = {
        "schema": 1,
        "command": command,
        "status": "successful",
        "argv": ["gpuhost", command],
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "inventory": ["inv"],
        "hosts": {"gpu-host": {"ok": 3}},
        "findings": {},
        "extra_vars": {"sglang_server_api_key": API_KEY},
        "facts": {"gpu-host": host_facts},
        "run_dir": str(run),
    }
    (run / "report.json").write_text(json.dumps(rep))
    return run


def test_report_has_every_section_and_a_plot(tmp_path):
    path = make_run(tmp_path, "20260101T000000Z")
    run = runfacts.load_run(path)
    text = report.render(run)
    for heading in (
        "## Host gpu-host",
        "### Host facts",
        "### Derived settings and why",
        "### Versions",
        "### Verification",
        "### Benchmark",
        "## Plot",
    ):
        assert heading in text
    assert "| output tok/s |" in text.replace("| concurrency | output tok/s", "| output tok/s")
    assert "| 64 | 210.0 | 420.0 |" in text
    assert "STAND-IN" in text
    assert "no P2P: the level does nothing" in text
    assert "`--kv-cache-dtype` | bf16" in text
    assert (path / report.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"


def test_report_never_shows_a_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("GPUHOST_SGLANG_API_KEY", API_KEY)
    path = make_run(
        tmp_path,
        "20260101T000000Z",
        facts={
            "gpuhost_findings": [
                {"check": "x", "status": "warn", "message": f"env had {API_KEY}", "fix": ""}
            ]
        },
    )
    rep = json.loads((path / "report.json").read_text())
    rep["findings"] = {
        "gpu-host": [{"check": "x", "status": "warn", "message": f"token {HF_TOKEN}", "fix": ""}]
    }
    (path / "report.json").write_text(json.dumps(rep))
    assert main(["--runs-dir", str(tmp_path), "report", path.name, "--plain"]) == 0
    written = (path / "report.md").read_text()
    for secret in (HF_TOKEN, API_KEY, "nccl-secret-value", FIXTURE_KEY):
        assert secret not in written
    assert "<redacted>" in written


def test_report_cli_prints_and_writes(tmp_path, capsys):
    make_run(tmp_path, "20260101T000000Z")
    assert main(["--runs-dir", str(tmp_path), "report", "20260101T000000Z", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "### Benchmark" in out and "[plot: bench.png]" in out
    assert (tmp_path / "20260101T000000Z" / "report.md").is_file()
    assert main(["--runs-dir", str(tmp_path), "report", "no-such-run"]) == 2


def test_compare_side_by_side(tmp_path, capsys):
    make_run(tmp_path, "20260101T000000Z")
    make_run(tmp_path, "20260102T000000Z", output_scale=0.8)
    code = main(
        [
            "--runs-dir",
            str(tmp_path),
            "report",
            "--compare",
            "20260101T000000Z",
            "20260102T000000Z",
            "--plain",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "# gpuhost compare: 20260101T000000Z vs 20260102T000000Z" in out
    assert "210.0 / 168.0" in out and "-20.0%" in out
    written = tmp_path / "20260102T000000Z" / "compare-20260101T000000Z.md"
    assert written.is_file()
    assert (
        tmp_path / "20260102T000000Z" / "compare-20260101T000000Z-20260102T000000Z.png"
    ).is_file()


def test_judge_bench_fails_only_with_the_flag(tmp_path):
    slow = make_run(tmp_path, "20260101T000000Z", output_scale=0.85)  # 15% below
    for flag, status in ((False, "successful"), (True, "failed")):
        run = runfacts.load_run(slow)
        rep = dict(run.report)
        # The profile has baseline points at concurrency 1 and 64 for 256/256.
        assert results.judge_bench(run, rep, fail_on_regression=flag) == 2
        assert rep["status"] == status
    ok = runfacts.load_run(make_run(tmp_path, "20260102T000000Z", output_scale=0.95))
    rep = dict(ok.report)
    assert results.judge_bench(ok, rep, fail_on_regression=True) == 0
    assert rep["status"] == "successful"


# --- facts from a run's events, and from earlier runs -------------------------------------
def write_event(run: Path, counter: int, host: str, facts: dict) -> None:
    events = run / "runner" / "artifacts" / "ansible" / "job_events"
    events.mkdir(parents=True, exist_ok=True)
    event = {
        "event": "runner_on_ok",
        "counter": counter,
        "event_data": {"host": host, "res": {"ansible_facts": facts}},
    }
    (events / f"{counter}-abc.json").write_text(json.dumps(event))


def test_facts_from_events_and_history(tmp_path):
    older = tmp_path / "20260101T000000Z"
    older.mkdir()
    (older / "report.json").write_text(json.dumps({"command": "provision", "hosts": {"h": {}}}))
    write_event(older, 2, "h", {"gpuhost_gpu": gpu_fact(), "ansible_other": 1})
    newer = tmp_path / "20260102T000000Z"
    newer.mkdir()
    (newer / "report.json").write_text(json.dumps({"command": "verify", "hosts": {"h": {}}}))
    write_event(newer, 9, "h", {"gpuhost_verify": {"passed": False}})
    write_event(newer, 10, "h", {"gpuhost_verify": {"passed": True}})
    run = runfacts.with_history(runfacts.load_run(newer))
    assert run.facts["h"]["gpuhost_verify"] == {"passed": True}
    assert run.facts["h"]["gpuhost_gpu"]["count"] == 8
    assert run.borrowed == {"h": {"gpuhost_gpu": "20260101T000000Z"}}
    text = report.render(run)
    assert "gpu of 20260101T000000Z" in text
    assert "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition" in text


def test_only_string_values_are_secrets():
    facts = {"gpuhost_sglang": {"api_key_set": True, "api_key": "sk-abcdef"}, "hf_token": None}
    assert redaction.redact(facts) == {
        "gpuhost_sglang": {"api_key_set": True, "api_key": "<redacted>"},
        "hf_token": None,
    }


# --- one GPU statement: a verify run after a preflight run --------------------------------
H200 = {
    "present": True,
    "count": 1,
    "driver": {"loaded": True, "version": "580.95.05", "module": "open"},
    "gpus": [{"index": 0, "name": "NVIDIA H200", "architecture": "Hopper"}],
}
NO_GPU_NOTE = "no NVIDIA GPU visible (gpuhost_gpu): GPU-count and architecture checks skipped"


def write_run(root: Path, name: str, command: str, started: str, facts: dict) -> Path:
    run = root / name
    run.mkdir(parents=True)
    rep = {
        "schema": 1,
        "command": command,
        "status": "successful",
        "argv": ["gpuhost", command],
        "started_at": started,
        "duration_s": 1.0,
        "hosts": {"gpu-host": {"ok": 3}},
        "findings": {},
        "facts": {"gpu-host": facts},
        "run_dir": str(run),
    }
    (run / "report.json").write_text(json.dumps(rep))
    return run


def test_verify_after_preflight_states_the_gpus_once_with_their_age(tmp_path):
    sglang = {"profile": "p", "model": "m", "served_model_name": "m", "tp_size": 1}
    write_run(
        tmp_path,
        "20260101T080000Z",
        "check",
        "2026-01-01T08:00:00+00:00",
        {"gpuhost_gpu": H200, "gpuhost_host": {"cpu_count": 8}, "gpuhost_sglang": sglang},
    )
    # gpuhost verify resolves the profile again, without GPU facts (it reads none).
    verify = write_run(
        tmp_path,
        "20260101T101500Z",
        "verify",
        "2026-01-01T10:15:00+00:00",
        {
            "gpuhost_sglang": {**sglang, "notes": [NO_GPU_NOTE, "another note"]},
            "gpuhost_verify": {"passed": True, "findings": []},
        },
    )
    # What `gpuhost report latest` renders (runs/latest is the verify run).
    (tmp_path / "latest").symlink_to(verify.name)
    assert main(["--runs-dir", str(tmp_path), "report", "latest", "--plain"]) == 0
    text = (verify / "report.md").read_text()
    # The one GPU statement, from the preflight run, with its age.
    assert "| GPUs | 1 x NVIDIA H200 |" in text
    assert "gpu of 20260101T080000Z, 2 h 15 min before this run" in text
    # No second, contradicting one.
    assert "no NVIDIA GPU visible" not in text
    gpu_lines = [line for line in text.splitlines() if "GPU" in line and "x NVIDIA" in line]
    assert gpu_lines == ["| GPUs | 1 x NVIDIA H200 |"]
    assert (
        "- the serving profile was checked in this run without GPU facts, so its GPU-count and "
        "architecture checks did not run there; the GPUs are those under Host facts (run "
        "20260101T080000Z (2 h 15 min before this run))"
    ) in text
    assert "- another note" in text


def test_a_run_that_read_no_gpu_keeps_its_note(tmp_path):
    # Preflight itself found no GPU: the host facts and the note agree, both stay.
    run = write_run(
        tmp_path,
        "20260101T080000Z",
        "check",
        "2026-01-01T08:00:00+00:00",
        {
            "gpuhost_gpu": {"present": False, "count": 0, "gpus": []},
            "gpuhost_sglang": {"profile": "p", "notes": [NO_GPU_NOTE]},
        },
    )
    text = report.render(runfacts.with_history(runfacts.load_run(run)))
    assert "| GPUs | 0 x none |" in text and NO_GPU_NOTE in text
