#!/usr/bin/env bash
# The controller matrix's newer line (issue 33): the unit tests and molecule scenario
# `default` with the controller on Debian 13's Python 3.13, ansible-core 2.21 and the
# `ansible` 14 package, beside the 2.19 / `ansible` 12 line the rest of `make test` runs on
# this machine's Python 3.11 (ansible-core 2.20+ needs Python >= 3.12 on the controller).
#
# The controller is a gpuhost/debian:13 container (scripts/build-image.sh trixie) on the host
# network, driving this machine's docker daemon through its socket. A copy of the checkout
# sits at the same path inside and outside (.cache/controller-next/src), and /tmp is shared,
# so the paths the tests and molecule hand to docker are the same on both sides. Its venv is
# built there by uv with the two lines overridden (UV_OVERRIDE), nothing else changed. The
# sglang wheels the catalogue tests parse need the locks' Python 3.11, which Debian 13 lacks:
# this machine's own 3.11 is lent read-only for that (it runs no controller code).
# Usage: scripts/controller-next.sh [pytest args...]   (default: tests)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# The venv's uv, the docker daemon and the Debian 13 image, or one line saying what to run
# first; with GPUHOST_SETUP_CHECK=1 stop here (scripts/project_tools.py).
eval "$(python3 scripts/project_tools.py scripts/controller-next.sh uv docker-daemon image:gpuhost/debian:13 || echo exit 2)"
work=$root/.cache/controller-next
src=$work/src
image=gpuhost/debian:13
scenario=${CONTROLLER_NEXT_SCENARIO:-default}
uv=$(command -v uv)
# The 3.11 the make venv is built on (its prefix, lent whole; never /usr, the image's own).
py311=$("$root/.venv/bin/python" -c 'import sys; print(sys.base_prefix)')
[[ $py311 != /usr ]] || { echo "controller-next: the venv's Python lives in /usr; cannot lend it" >&2; exit 2; }

# The copy: what git tracks, plus what is not ignored (a working tree's new files).
rm -rf "$src"
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$src"
# The venvs of the sglang wheels and the bench client are the checkout's (the same locks on
# the same lent 3.11): shared, not built twice (they are GBs).
mkdir -p "$root/.cache/sglang-venvs" "$root/.cache/bench-e2e" "$src/.cache"
ln -sfn "$root/.cache/sglang-venvs" "$src/.cache/sglang-venvs"
ln -sfn "$root/.cache/bench-e2e" "$src/.cache/bench-e2e"
# Molecule finds the project (and its .config/molecule/config.yml) by the git top level.
git -C "$src" init -q
mkdir -p "$src/.collections/ansible_collections/gpuhost"
ln -sfn ../../.. "$src/.collections/ansible_collections/gpuhost/gpu"
printf 'ansible-core>=2.21,<2.22\nansible>=14,<15\n' >"$work/override.txt"

inside=$(cat <<'SCRIPT'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
command -v ssh >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-client dpkg-dev make git >/dev/null; }
cd "$SRC"
uv=/opt/controller-next/uv  # off PATH: the tests see only the venv's own uv, as on the host
"$uv" venv -q .venv -p /usr/bin/python3
VIRTUAL_ENV=$SRC/.venv "$uv" pip install -q --require-hashes --no-deps -r locks/uv-*.txt
VIRTUAL_ENV=$SRC/.venv UV_OVERRIDE=$OVERRIDE "$uv" pip install -q -e '.[test]'
touch .venv/.stamp
export PATH=$SRC/.venv/bin:$PATH:$PY311/bin ANSIBLE_CONFIG=$SRC/ansible.cfg
python --version
ansible --version | head -1
ansible-galaxy collection list 2>/dev/null | grep -E '^(community.general|community.proxmox|ansible.posix) ' || true
echo "controller-next: pytest $*"
pytest -q -p no:cacheprovider "$@"
# The scenario runs under a name of its own (its containers too), so it never meets the same
# scenario of the molecule lane that make test runs beside it. Copied after the unit tests,
# which check that every scenario folder is one make test runs (tests/test_make_lanes.py).
cp -r "molecule/$SCENARIO" "molecule/next-$SCENARIO"
for f in "molecule/next-$SCENARIO"/host_vars/gpuhost-"$SCENARIO"-*; do
  if [[ -e $f ]]; then mv "$f" "${f/gpuhost-$SCENARIO-/gpuhost-next-$SCENARIO-}"; fi
done
echo "controller-next: molecule test -s next-$SCENARIO"
molecule test -s "next-$SCENARIO"
SCRIPT
)
args=("$@")
((${#args[@]})) || args=(tests)
exec docker run --rm --network host --name gpuhost-controller-next \
  -v /tmp:/tmp -v "$work:$work" -v /var/run/docker.sock:/var/run/docker.sock \
  -v "$root/.cache/sglang-venvs:$root/.cache/sglang-venvs" -v "$root/.cache/bench-e2e:$root/.cache/bench-e2e" \
  -v "$(command -v docker):/usr/local/bin/docker:ro" -v "$uv:/opt/controller-next/uv:ro" \
  -v /etc/ssl/certs:/etc/ssl/certs:ro -v "$py311:$py311:ro" \
  -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt -e SRC="$src" -e SCENARIO="$scenario" \
  -e OVERRIDE="$work/override.txt" -e PY311="$py311" -e UV_PYTHON_DOWNLOADS=never \
  "$image" bash -c "$inside" controller-next "${args[@]}"
