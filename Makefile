# gpuhost: `make demo` (try it on a local container), `make test` (everything CI runs).
# Both set themselves up: apt packages, the docker daemon, base images and the venv.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
STAGE := scripts/stage.sh
UV_VERSION := 0.9.30
# Every molecule scenario make test runs; each has a folder under molecule/. The order is the
# order the lanes of make test take them in: longest first.
MOLECULE_SCENARIOS ?= sglang_server rolling_update metrics python_env nvidia default adopt verify
# make test runs two lanes side by side. One scenario keeps one core busy (ansible-playbook and
# its modules run one after another), so with everything in one lane a 2-core machine sat half
# idle. The molecule lane starts with the two longest scenarios (MOLECULE_LONG); the other lane
# (beside) with the lints, the collection, the unit tests, rebuild-e2e and the demo. Then both
# lanes take the remaining scenarios (LANE_SHARED) from one list, each the next one the other
# has not claimed yet (scripts/molecule-scenarios.sh --shared), so neither lane idles while the
# other still has a queue: with a fixed split, one lane ended ~18 min before the other.
# tests/test_make_lanes.py: each scenario of MOLECULE_SCENARIOS runs once, in one lane.
MOLECULE_LONG := sglang_server rolling_update
LANE_MOLECULE = $(filter $(MOLECULE_LONG),$(MOLECULE_SCENARIOS))
LANE_SHARED = $(filter-out $(MOLECULE_LONG),$(MOLECULE_SCENARIOS))

.PHONY: help venv docker images lint unit collection molecule rebuild-e2e controller-next beside test lanes demo demo-clean clean lock vm-smoke

help:
	@echo "make demo   - provision a local sandbox container twice and print the report"
	@echo "make test   - lint, unit tests and molecule scenarios (what CI runs)"
	@echo "make lock   - re-resolve locks/*.in into hashed locks/*.txt (uv pip compile)"
	@echo "make collection - build gpuhost.gpu, install the tarball, run a play from it"
	@echo "make rebuild-e2e - gpuhost rebuild end to end against the Proxmox API stand-in"
	@echo "make controller-next - unit tests and molecule default on Python 3.13, ansible-core 2.21, ansible 14"
	@echo "make vm-smoke - one real QEMU VM (Secure Boot on): check + provision --tags host (slow, not in make test)"
	@echo "make lanes  - which molecule scenarios each lane of make test runs"
	@echo "make lint | unit | molecule | images | venv | clean"

$(VENV)/.stamp: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@test -x $(VENV)/bin/uv || $(PY) -m pip install -q --disable-pip-version-check --require-hashes --only-binary :all: --no-deps -r locks/uv-$(UV_VERSION).txt
	@VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/uv pip install -q -e '.[test]'
	@touch $@

venv: $(VENV)/.stamp

docker:
	@scripts/ensure-docker.sh

images: docker
	@$(STAGE) image-debian12 scripts/build-image.sh bookworm
	@$(STAGE) image-debian13 scripts/build-image.sh trixie

lint: venv
	@$(STAGE) yamllint yamllint --strict .
	@$(STAGE) ansible-lint ansible-lint --offline --profile production
	@$(STAGE) ruff ruff check .
	@$(STAGE) ruff-format ruff format --check .

unit: venv
	@$(STAGE) pytest pytest -q -p no:cacheprovider --durations=15 tests

# Build the collection tarball, install it into a fresh path and run a play from there.
collection: venv
	@$(STAGE) collection scripts/collection-test.sh

# gpuhost rebuild end to end: the Proxmox API stand-in, its VMs as systemd containers over SSH,
# two rebuilds with site.yml and verify (tests/test_proxmox_rebuild.py). Part of make test.
rebuild-e2e: venv images
	@GPUHOST_REBUILD_E2E=1 $(STAGE) rebuild-e2e pytest -q -p no:cacheprovider tests/test_proxmox_rebuild.py

# The controller matrix's newer line (docs/controllers.md): the unit tests and molecule
# scenario default on Debian 13's Python 3.13 with ansible-core 2.21 and the ansible 14
# package, in a container that drives this machine's docker. Not in make test yet: ~13 min
# and a second set of molecule containers beside the molecule lane (docs/controllers.md).
controller-next: venv images
	@$(STAGE) controller-next scripts/controller-next.sh

# A scenario that fails runs once more (scripts/molecule-scenarios.sh says why). Stage logs:
# .cache/stages/.
molecule: venv images
	@scripts/molecule-scenarios.sh $(MOLECULE_SCENARIOS)

# Beside the molecule lane, in a second lane: the lints, the collection, the unit tests,
# rebuild-e2e, the newcomer's path (make demo, which starts with `gpuhost check` on the blank
# sandbox), then the shared scenarios it claims first. Alone (`make beside`) it claims them all.
# The demo keeps its run records apart (GPUHOST_RUNS_DIR) so that it never reads a run that a
# molecule test made.
beside: venv images
	@rc=0; claims=$${GPUHOST_LANE_CLAIMS:-$$(mktemp -d)}; \
	  $(MAKE) --no-print-directory lint || rc=1; \
	  $(MAKE) --no-print-directory collection || rc=1; \
	  $(MAKE) --no-print-directory unit || rc=1; \
	  $(MAKE) --no-print-directory rebuild-e2e || rc=1; \
	  GPUHOST_RUNS_DIR=$(CURDIR)/.cache/demo-runs $(STAGE) demo scripts/demo.sh || rc=1; \
	  scripts/molecule-scenarios.sh --shared "$$claims" $(LANE_SHARED) || rc=1; \
	  exit $$rc

lanes:
	@echo "molecule lane: $(LANE_MOLECULE)"
	@echo "beside lane: lint collection pytest rebuild-e2e demo"
	@echo "then either lane, whichever is free first: $(LANE_SHARED)"

# Both lanes claim the shared scenarios in one fresh folder (GPUHOST_LANE_CLAIMS).
test:
	@rm -f .cache/stage-times.tsv .cache/beside.log
	@$(STAGE) venv $(MAKE) --no-print-directory venv
	@$(MAKE) --no-print-directory images || { scripts/stage-summary.sh; exit 1; }
	@mkdir -p .cache; export GPUHOST_LANE_CLAIMS=$$(mktemp -d "$(CURDIR)/.cache/lane-claims.XXXXXX"); \
	  $(MAKE) --no-print-directory beside >.cache/beside.log 2>&1 & beside=$$!; \
	  rc=0; scripts/molecule-scenarios.sh $(LANE_MOLECULE) || rc=$$?; \
	  scripts/molecule-scenarios.sh --shared "$$GPUHOST_LANE_CLAIMS" $(LANE_SHARED) || rc=$$?; \
	  brc=0; wait $$beside || brc=$$?; \
	  rm -rf "$$GPUHOST_LANE_CLAIMS"; \
	  echo "---- the other lane: lints, collection, unit tests, rebuild-e2e, demo, the scenarios it claimed ----"; \
	  grep -E '^(==>|<==) ' .cache/beside.log || true; \
	  tail -n 60 .cache/beside.log; \
	  if [ $$rc -ne 0 ] || [ $$brc -ne 0 ]; then scripts/stage-summary.sh; exit 1; fi
	@scripts/stage-summary.sh

# Locks for the python_env role, resolved by uv for the hosts' Python and glibc (3.11 on
# Debian 12; sglang 0.5.23 ships manylinux_2_34 wheels only). --exclude-newer makes a
# re-run reproduce the same files; move the date to take newer transitive releases.
LOCK_PYTHON ?= 3.11
LOCK_PLATFORM ?= x86_64-manylinux_2_34
LOCK_EXCLUDE_NEWER ?= 2026-11-30T00:00:00Z

lock:
	@command -v uv >/dev/null || $(MAKE) --no-print-directory venv
	@for in in locks/*.in; do \
	  echo "lock: $$in -> $${in%.in}.txt"; \
	  uv pip compile --quiet --upgrade --generate-hashes --python-version $(LOCK_PYTHON) \
	    --python-platform $(LOCK_PLATFORM) --exclude-newer $(LOCK_EXCLUDE_NEWER) \
	    "$$in" -o "$${in%.in}.txt"; \
	done

# One real VM (QEMU, software emulation here, OVMF with Secure Boot on) through `gpuhost check`
# and `gpuhost provision --tags host`; ~1 h on this machine, so not part of make test.
# docs/vm-smoke.md; record: .cache/vm-smoke/record/.
vm-smoke: venv
	@scripts/vm-smoke.sh

demo: venv images
	@scripts/demo.sh

demo-clean:
	@docker rm -f gpuhost-sandbox >/dev/null 2>&1 || true

clean: demo-clean
	rm -rf $(VENV) .cache runs
