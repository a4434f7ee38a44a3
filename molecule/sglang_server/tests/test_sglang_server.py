"""sglang_server on real systemd, with the SGLang stand-in package (tests/standin/sglang_pkg).

Runs in molecule's verify step, after converge and idempotence. The first tests check the
state converge left; the later ones drive ansible-playbook against the same container for the
cases a single converge cannot show (they run in file order and each leaves a healthy server):
re-run without restart, bad flag rejected before any change, flag change, three bad changes
rolled back, an open listener without key, model_cache resume, then a scan for the secrets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parents[1]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", "")
SERVICE = "sglang-server"
UNIT = f"/etc/systemd/system/{SERVICE}.service"
ENV_FILE = f"/etc/gpuhost/{SERVICE}.env"
KEYS_FILE = f"/etc/gpuhost/{SERVICE}.keys"
KNOWN_GOOD = "/var/lib/gpuhost/sglang_server/known-good"
API_KEY = "gpuhost-test-apikey-5f0c1d2e3b4a"  # host_vars of this scenario
HF_TOKEN = "hf_gpuhostTestToken7c9e2a41"
SERVED = "glm-5"
# The pinned commit the scenario serves (host_vars: sglang_server_revision).
REVISION = "5b9f1a0c3d7e2f4a6b8c0d1e2f3a4b5c6d7e8f90"
OUTPUTS: list[str] = []  # every ansible-playbook output of this session, for the secret scan

pytestmark = pytest.mark.skipif(not INVENTORY, reason="runs under molecule verify")


class Run:
    """One ansible-playbook run: return code and all its output (failures go to stderr)."""

    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr

    def said(self, text: str) -> bool:
        # Messages may be JSON-escaped or wrapped: compare with whitespace collapsed.
        flat = " ".join(self.out.replace("\\n", "\n").replace('\\"', '"').split())
        return " ".join(text.split()) in flat

    def changed(self) -> int:
        match = re.search(r"changed=(\d+)\s+unreachable=\d+\s+failed=\d+", self.out)
        assert match, self.out[-3000:]
        return int(match.group(1))


def converge(extra: dict | None = None, playbook: str = "converge.yml", *flags: str) -> Run:
    """ansible-playbook converge.yml against the scenario's container, output kept."""
    cmd = ["ansible-playbook", "-i", INVENTORY, str(SCENARIO / playbook), *flags]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "COLUMNS": "1000"}
    run = Run(subprocess.run(cmd, capture_output=True, text=True, env=env, check=False))
    OUTPUTS.append(run.out)
    return run


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {SERVICE}"))


def healthy(host) -> bool:
    health = host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health")
    models = host.run(
        f"curl -s -H 'Authorization: Bearer {API_KEY}' http://127.0.0.1:30000/v1/models"
    )
    return health.stdout == "200" and SERVED in models.stdout


# --- the state converge left ------------------------------------------------------------------


def test_service_runs_the_stand_in_as_the_service_user(host):
    service = host.service(SERVICE)
    assert service.is_running and service.is_enabled
    assert host.check_output(f"ps -o user= -p {main_pid(host)}").strip() == "gpuhost"


def test_unit_execstart_is_the_validated_profile_without_secrets(host):
    unit = host.file(UNIT).content_string
    assert "Type=exec" in unit and "User=gpuhost" in unit
    assert f"EnvironmentFile={ENV_FILE}" in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--tp-size 8 " in exec_start and "--kv-cache-dtype bf16" in exec_start
    assert "--disable-custom-all-reduce" in exec_start  # the recorded nccl decision: no P2P
    for inert in ("--nsa-", "--enable-flashinfer-allreduce-fusion", "--fp8-gemm-backend", " --tp "):
        assert inert not in exec_start
    assert "--api-key" not in unit and API_KEY not in unit
    assert int(re.search(r"TimeoutStartSec=(\d+)", unit).group(1)) >= 1800


def test_env_file_is_root_only_and_offline(host):
    env = host.file(ENV_FILE)
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    text = env.content_string
    assert "HF_HUB_OFFLINE=1" in text and "CUDA_HOME=" in text
    assert "NCCL_MIN_CTAS=8" in text  # copied from nccl.env
    assert "SGLANG_ENABLE_JIT_DEEPGEMM=0" in text  # the profile's env


def test_known_good_copy_matches_the_live_config(host):
    assert host.file(KNOWN_GOOD).mode == 0o700
    for name, live in (("unit", UNIT), ("env", ENV_FILE)):
        copy = host.file(f"{KNOWN_GOOD}/{name}")
        assert copy.mode == 0o600 and copy.user == "root"
        assert copy.sha256sum == host.file(live).sha256sum


def test_health_gate_contract(host):
    assert healthy(host)
    # /v1/* needs the key; /health does not (docs/reference.md §3).
    assert (
        host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/v1/models").stdout
        == "401"
    )


def test_systemd_analyze_verify_is_clean(host):
    result = host.run(f"systemd-analyze verify {UNIT}")
    assert result.rc == 0 and result.stderr.strip() == "", result.stderr


def test_security_exposure_is_at_most_2(host):
    out = host.check_output(f"systemd-analyze security {SERVICE}.service --no-pager")
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out).group(1))
    print(f"systemd-analyze security {SERVICE}.service: {score}")
    assert score <= 2.0


def test_model_cache_marker_and_snapshot(host):
    marker = host.file(
        f"/var/cache/gpuhost/huggingface/gpuhost-complete/lukealonso--GLM-5-NVFP4@{REVISION}.json"
    )
    assert marker.exists and marker.user == "gpuhost"
    assert json.loads(marker.content_string)["model"] == "lukealonso/GLM-5-NVFP4"
    snapshots = host.run(
        "ls /var/cache/gpuhost/huggingface/hub/models--lukealonso--GLM-5-NVFP4/snapshots/*/"
    )
    assert "config.json" in snapshots.stdout


# --- side cases, each through ansible-playbook -------------------------------------------------


def test_rerun_changes_nothing_and_keeps_the_process(host):
    before = main_pid(host)
    proc = converge()
    assert proc.rc == 0, proc.out[-3000:]
    assert proc.changed() == 0
    assert main_pid(host) == before


# Two of the rules, end to end; tests/test_profile_validate.py covers every rule on both
# sides against the real catalogues.
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"--tp": 8}, "write --tp-size, and it is set through sglang_server_tp_size"),
        ({"--kv-cache-dtype": "auto"}, "becomes fp8_e4m3"),
    ],
)
def test_bad_flag_is_rejected_before_the_unit_is_touched(host, flags, message):
    pid, unit = main_pid(host), host.file(UNIT).sha256sum
    proc = converge({"sglang_server_flags": flags})
    assert proc.rc != 0
    assert proc.said(message)
    assert proc.said("nothing was changed")
    assert proc.changed() == 0
    assert main_pid(host) == pid and host.file(UNIT).sha256sum == unit


def test_open_listener_without_key_is_rejected(host):
    pid = main_pid(host)
    proc = converge({"sglang_server_host": "0.0.0.0", "sglang_server_api_key": ""})
    assert proc.rc != 0
    # The role's own validation (roles/sglang_server/meta/constraints.yml, rule
    # open_listener_needs_api_key) refuses it before the profile is even rendered.
    assert proc.said(
        "sglang_server_api_key: got ''; allowed: a non-empty value when "
        "sglang_server_host is '0.0.0.0'"
    )
    assert main_pid(host) == pid


def test_flag_change_restarts_and_is_healthy(host):
    before = main_pid(host)
    proc = converge({"sglang_server_flags": {"--max-running-requests": 32}})
    assert proc.rc == 0, proc.out[-3000:]
    assert "--max-running-requests 32" in host.file(UNIT).content_string
    assert main_pid(host) != before and healthy(host)
    assert host.file(f"{KNOWN_GOOD}/unit").sha256sum == host.file(UNIT).sha256sum


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("never-healthy", "not healthy within 15 s: /health answers 503"),
        ("wrong-answers", "expected '42' in the reply"),
        ("crash-on-start", "the server exited"),
    ],
)
def test_bad_change_rolls_back_to_the_healthy_previous_server(host, fault, cause):
    unit, env = host.file(UNIT).sha256sum, host.file(ENV_FILE).sha256sum
    proc = converge(
        {
            "sglang_server_flags": {"--max-running-requests": 32},
            "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": fault},
        }
    )
    assert proc.rc != 0
    assert proc.said(cause)
    assert proc.said(
        "Rolled back to the known-good unit and env; the previous server is healthy again"
    )
    assert proc.said("Journal of the failed start")
    journal_mark = (
        "stand-in crashed while loading" if fault == "crash-on-start" else f"fault mode: {fault}"
    )
    assert proc.said(journal_mark)
    assert host.file(UNIT).sha256sum == unit and host.file(ENV_FILE).sha256sum == env
    assert healthy(host)


def test_interrupted_run_restarts_and_gates_the_written_config(host):
    """A run stopped after writing the config but before the gated restart: the next run's
    templates change nothing, yet the config differs from the known-good one, so it restarts
    and gates it (it used to leave it untested until the next crash or reboot)."""
    flags = {"sglang_server_flags": {"--max-running-requests": 16}}
    pid = main_pid(host)
    written = converge(flags, "render_only.yml")
    assert written.rc == 0, written.out[-3000:]
    assert "--max-running-requests 16" in host.file(UNIT).content_string
    assert host.file(f"{KNOWN_GOOD}/unit").sha256sum != host.file(UNIT).sha256sum
    assert main_pid(host) == pid  # the interrupted run never restarted

    proc = converge(flags)
    assert proc.rc == 0, proc.out[-3000:]
    assert main_pid(host) != pid and healthy(host)
    assert host.file(f"{KNOWN_GOOD}/unit").sha256sum == host.file(UNIT).sha256sum
    # And then it is converged: nothing restarts again.
    pid = main_pid(host)
    assert converge(flags).changed() == 0 and main_pid(host) == pid


def test_known_good_the_service_account_owns_is_not_restored(host):
    """Known-good files the service account could have written are never copied back by root:
    the failed start stops the server instead, and says why; the failed start's journal is in
    the fact gpuhost_sglang_server (last_start), which the run record keeps."""
    host.run(f"chown gpuhost {KNOWN_GOOD}/env")
    try:
        proc = converge(
            {
                "sglang_server_flags": {"--max-running-requests": 32},
                "sglang_server_extra_env": {"SGLANG_STANDIN_FAULT": "crash-on-start"},
            },
            "converge.yml",
            "-v",
        )
    finally:
        host.run(f"chown root {KNOWN_GOOD}/env")
    assert proc.rc != 0
    assert proc.said("The known-good configuration was not restored")
    assert proc.said(f"{KNOWN_GOOD}/env is owned by gpuhost, not root")
    assert proc.said("the server was stopped")
    assert not host.service(SERVICE).is_running
    assert "SGLANG_STANDIN_FAULT=crash-on-start" in host.file(ENV_FILE).content_string
    # -v prints the fact as set_fact recorded it (JSON or YAML, per the result format).
    recorded = proc.out[proc.out.index("last_start") : proc.out.index("Fail with the cause")]
    assert "journal" in recorded and "stand-in crashed while loading" in recorded
    # The next run starts the converged config on a stopped server.
    back = converge()
    assert back.rc == 0, back.out[-3000:]
    assert healthy(host)


def test_model_cache_resumes_an_interrupted_download(host):
    repo = "/var/cache/gpuhost/huggingface/hub/models--acme--tiny"
    # A Python entry point, as the role requires of model_cache_hf_cli (it runs in-process).
    wrapper = (
        "#!/usr/bin/env python3\n# test: interrupt the first download after 5 MiB\n"
        "# (the marker lives in HF_HOME: the download unit's /tmp is private to each start)\n"
        "import os, runpy\n"
        "marker = os.path.join(os.environ['HF_HOME'], '.hf-interrupted')\n"
        "if not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        "    os.environ['HF_STANDIN_FAIL_AFTER_MIB'] = '5'\n"
        "runpy.run_path('/usr/local/bin/hf-standin', run_name='__main__')\n"
    )
    flaky = "/usr/local/bin/hf-flaky"
    host.run(f"cat > {flaky} <<'EOF'\n{wrapper}EOF\nchmod 755 {flaky}")
    extra = {"model_cache_model_id": "acme/tiny", "model_cache_hf_cli": "/usr/local/bin/hf-flaky"}
    first = converge(extra)
    assert first.rc != 0 and first.said("the download failed")
    assert first.said("it resumes on the next run")
    partial = host.check_output(f"find {repo} -name '*.incomplete'").split()
    assert len(partial) == 1
    inode = host.check_output(f"stat -c %i {partial[0]}")
    second = converge(extra)
    assert second.rc == 0, second.out[-3000:]
    assert int(host.check_output(f"find {repo} -name '*.incomplete' | wc -l")) == 0
    # Resumed, not fetched again: the finished blob is the partial file, grown and renamed.
    assert host.check_output(f"stat -c %i {partial[0].removesuffix('.incomplete')}") == inode
    assert host.file(
        f"/var/cache/gpuhost/huggingface/gpuhost-complete/acme--tiny@{REVISION}.json"
    ).exists


def test_open_listener_with_key_gets_the_port_rule(host):
    proc = converge(
        {
            "sglang_server_host": "0.0.0.0",
            "sglang_server_firewall_cidrs": ["10.0.0.0/8", "fd00::/8"],
        }
    )
    assert proc.rc == 0, proc.out[-3000:]
    assert "--host 0.0.0.0" in host.file(UNIT).content_string
    table = host.check_output("nft list table inet gpuhost_sglang")
    for part in ("elements = { 30000, 30100-31000 }", "10.0.0.0/8", "fd00::/8", "drop"):
        assert part in table, table
    assert healthy(host)


def test_back_to_the_converged_config(host):
    proc = converge()
    assert proc.rc == 0, proc.out[-3000:]
    assert healthy(host)
    # Back on loopback the port rule stays, loopback only (every server has one).
    table = host.check_output("nft list table inet gpuhost_sglang")
    assert "saddr" not in table and "drop" in table, table


# --- secrets -------------------------------------------------------------------------------------


def _admin_key(host) -> str:
    return next(
        line.split("=", 1)[1]
        for line in host.file(KEYS_FILE).content_string.splitlines()
        if line.startswith("admin_api_key=")
    )


# One walk of the whole filesystem for all three secrets (it took ~85 s per secret), then a
# grep per file it found for which secret that file holds.
_FOUND: dict[str, dict[str, list[str]]] = {}


def _files_holding(host, secret: str) -> list[str]:
    name = host.backend.get_hostname()
    if name not in _FOUND:
        secrets = [API_KEY, HF_TOKEN, _admin_key(host)]
        patterns = " ".join(f"-e '{value}'" for value in secrets)
        files = host.run(
            f"grep -rlaF {patterns} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev"
        ).stdout.split()
        _FOUND[name] = {
            value: [f for f in files if host.run(f"grep -qaF -- '{value}' '{f}'").rc == 0]
            for value in secrets
        }
    return _FOUND[name][secret]


@pytest.mark.parametrize(
    "secret", [API_KEY, HF_TOKEN, "admin"], ids=["api_key", "hf_token", "admin_key"]
)
def test_secrets_appear_nowhere_but_the_root_only_keys_file(host, secret):
    # The keys (the client's and the admin key the host generated) live in the keys file only.
    if secret == "admin":
        secret = _admin_key(host)
    allowed = {KEYS_FILE} if secret != HF_TOKEN else set()
    found = _files_holding(host, secret)
    assert set(found) <= allowed, found
    for path in found:
        assert host.file(path).mode == 0o600 and host.file(path).user == "root"
    assert secret not in host.check_output(f"journalctl --no-pager -u {SERVICE}")
    assert secret not in host.check_output("ps -eo args")
    assert secret not in host.check_output(f"systemctl show {SERVICE}")
    for output in OUTPUTS:
        assert secret not in output
    # The key did reach the server: the journal shows it masked where SGLang prints it.
    if secret == API_KEY:
        journal = host.check_output(f"journalctl --no-pager -u {SERVICE}")
        assert "api_key='***'" in journal and "admin_api_key='***'" in journal
