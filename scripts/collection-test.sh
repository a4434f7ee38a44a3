#!/usr/bin/env bash
# The repository as the collection gpuhost.gpu, the way a Galaxy/AWX user gets it: build the
# tarball, install it from the clone as README.md says (into a fresh HOME), run a play from
# the installed copy (outside the clone, without its ansible.cfg), and check that
# execution-environment.yml builds a context.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
eval "$(python3 scripts/project_tools.py scripts/collection-test.sh ansible-galaxy ansible-playbook \
  ansible-builder || echo exit 2)"
bin=$(dirname "$(command -v ansible-galaxy)")
out="$repo/.cache/collection"
rm -rf "$out" && mkdir -p "$out/run"

"$bin/ansible-galaxy" collection build --force --output-path "$out" . >/dev/null
tarball=$(ls "$out"/gpuhost-gpu-*.tar.gz)
echo "collection: built $(basename "$tarball")"
# Installed the way README "As an Ansible collection" says, from the clone's root: there
# ansible.cfg's collections_path (.collections, a link to the clone) already holds
# gpuhost.gpu, so a plain install says "Nothing to do" and --force fails on the link;
# ANSIBLE_COLLECTIONS_PATH=~/.ansible/collections installs into the user's own path, here a
# fresh HOME under .cache. --no-deps: Galaxy is unreachable here; the dependencies come from
# the `ansible` package.
readme_install='ANSIBLE_COLLECTIONS_PATH=~/.ansible/collections ansible-galaxy collection install'
grep -qF "$readme_install gpuhost-gpu-" README.md \
  || { echo "collection: README.md no longer says: $readme_install <tarball>"; exit 1; }
home="$out/home"
installed="$home/.ansible/collections"
mkdir -p "$home"
HOME="$home" ANSIBLE_COLLECTIONS_PATH="$installed" "$bin/ansible-galaxy" collection install \
  --no-deps "$tarball" >"$out/install.log" 2>&1 \
  || { cat "$out/install.log"; echo "collection: the README's install failed"; exit 1; }
grep -q "gpuhost.gpu:.* was installed successfully" "$out/install.log" \
  || { cat "$out/install.log"; echo "collection: the README's install installed nothing"; exit 1; }
test -f "$installed/ansible_collections/gpuhost/gpu/playbooks/site.yml"
echo "collection: installed from the clone as README says, into $installed"

cat >"$out/run/inventory.yml" <<'YAML'
gpu_hosts:
  hosts:
    controller:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
YAML
# The preflight stage reads this machine (no GPU: it says so) and changes nothing. On a
# controller not booted with systemd (a CI sandbox) its gate stops the play, as it must, on
# the finding preflight.systemd; on a systemd host the play passes.
log="$out/run/preflight.log"
rc=0
(cd "$out/run" && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH="$installed" \
  ANSIBLE_FORCE_COLOR=0 "$bin/ansible-playbook" gpuhost.gpu.preflight -i inventory.yml \
  >"$log" 2>&1) || rc=$?
grep -q "TASK \[gpuhost.gpu.preflight : " "$log" \
  || { tail -n 40 "$log"; echo "collection: the play did not run the installed roles"; exit 1; }
if [ -d /run/systemd/system ]; then
  expect_rc=0 expect_failed=0
else
  expect_rc=2 expect_failed=1
  grep -q "FAIL  *preflight.systemd  *not booted with systemd" "$log" \
    || { tail -n 40 "$log"; echo "collection: no preflight.systemd fail on a host without systemd"; exit 1; }
fi
[ "$rc" = "$expect_rc" ] \
  || { tail -n 40 "$log"; echo "collection: the installed preflight exited $rc, expected $expect_rc"; exit 1; }
grep -Eq "controller +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=$expect_failed" "$log" \
  || { tail -n 5 "$log"; echo "collection: unexpected recap"; exit 1; }
echo "collection: gpuhost.gpu.preflight ran from $installed (changed=0, exit $rc)"

# The execution environment definition: ansible-builder writes the build context (no pull).
cp "$tarball" "$out/gpuhost-gpu.tar.gz"
cp execution-environment.yml "$out/"
"$bin/ansible-builder" create -f "$out/execution-environment.yml" -c "$out/ee" >/dev/null
test -f "$out/ee/_build/collections/gpuhost-gpu.tar.gz"
echo "collection: execution-environment.yml -> build context in $out/ee"
