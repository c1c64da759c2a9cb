#!/usr/bin/env bash
# Installs AReaL's real worker server (`python -m areal.infra.rpc.rpc_server`, CPU only) into a virtualenv in a
# cache outside the checkout, keyed by the Python version and a hash of tools/install/areal-worker-requirements.txt, and
# links it to .tools/areal-worker. An environment already in the cache is skipped (its marker file is written last,
# so an interrupted install is redone). Usage: tools/install/areal-worker.sh   (PYTHON picks the interpreter)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=versions.env
source "$root/tools/install/versions.env"
requirements=$root/$AREAL_WORKER_REQUIREMENTS
python=${PYTHON:-python3}
cache=${AREAL_WORKERS_CACHE:-$HOME/.cache/areal-workers}/areal-worker
link=$root/.tools/areal-worker
marker_name=.areal-workers-installed

step() { printf '\033[1m==> %s\033[0m\n' "$*"; }
fail() { printf 'make areal-worker: %s\n' "$*" >&2; exit 1; }

cache_key() {
  local version digest
  version=$("$python" -c 'import sys; print("py%d.%d" % sys.version_info[:2])') || fail "cannot run $python"
  digest=$(sha256sum "$requirements" | cut -c1-12)
  echo "areal-$AREAL_VERSION-$version-$digest"
}

check_pins() {
  [ -f "$requirements" ] || fail "$requirements is missing"
  grep -qE "^areal==$AREAL_VERSION( |$)" "$requirements" \
    || fail "$AREAL_WORKER_REQUIREMENTS does not pin areal==$AREAL_VERSION (tools/install/versions.env says so)"
}

# Names the package pip failed on: the one its ERROR lines name, else the last one it was collecting.
explain_pip_failure() {
  local log=$1 named last
  if grep -q 'DO NOT MATCH THE HASHES' "$log"; then
    named=$(sed -n 's/^    \([A-Za-z0-9._-]*==[^ ]*\) from .*/\1/p' "$log" | sort -u | tr '\n' ' ')
    tail -n 20 "$log" >&2
    fail "${named:-a package} does not match the sha256 pinned in $AREAL_WORKER_REQUIREMENTS: the index served another file. Find out why before re-pinning (tools/install/pin_hashes.py); full log: $log"
  fi
  named=$(sed -n -e 's/^ERROR: No matching distribution found for \([^ ]*\).*/\1/p' \
    -e 's/^ERROR: Failed building wheel for \([^ ]*\).*/\1/p' -e 's/^ERROR: Failed to build \(.*\)/\1/p' \
    -e "s/^ERROR: Could not install packages due to an OSError.*'\([^']*\.whl\)'.*/\1/p" "$log" | sort -u | tr '\n' ' ')
  last=$(grep -oE '^Collecting [^ ]+' "$log" | tail -n 1 | cut -d' ' -f2 || true)
  tail -n 20 "$log" >&2
  [ -n "$named" ] && fail "pip failed on ${named% } (full log: $log)"
  fail "pip failed${last:+ while installing $last} (full log: $log)"
}

pip_install() { # <venv> <log>
  local venv=$1 log=$2
  local count; count=$(grep -cE '^[A-Za-z0-9]' "$requirements")
  echo "    $count pinned packages, --no-deps (torch with its unused CUDA libraries: about 7 GB; log: $log)"
  # --no-cache-dir: the wheels would otherwise stay in pip's cache beside the installed copy (GBs for torch).
  # --require-hashes: every file must have the sha256 the requirements file pins (tools/install/pin_hashes.py).
  "$venv/bin/python" -m pip install --no-deps --require-hashes --no-cache-dir --no-input --progress-bar off \
    --disable-pip-version-check -r "$requirements" >"$log" 2>&1 || explain_pip_failure "$log"
}

# Imports the server module: a ModuleNotFoundError names a module that no pinned package provides.
verify_imports() { # <venv>
  local venv=$1 out
  if ! out=$("$venv/bin/python" -c 'import areal.infra.rpc.rpc_server' 2>&1); then
    printf '%s\n' "$out" | tail -n 15 >&2
    local missing; missing=$(printf '%s\n' "$out" | sed -n "s/.*No module named '\([^']*\)'.*/\1/p" | tail -n 1)
    [ -n "$missing" ] && fail "areal.infra.rpc.rpc_server imports '$missing', which no package of $AREAL_WORKER_REQUIREMENTS provides"
    fail "importing areal.infra.rpc.rpc_server failed (see above)"
  fi
  "$venv/bin/python" -m areal.infra.rpc.rpc_server --help >/dev/null || fail "rpc_server --help failed"
  # A trainer in this environment imports areal-workers' dependencies too (the package comes from adapter/).
  "$venv/bin/python" -c 'import kubernetes, pyhelm3' || fail "kubernetes or pyhelm3 does not import (see above)"
}

install() { # <dir>
  local dir=$1 log=$1.log start=$SECONDS
  rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
  "$python" -m venv "$dir" || fail "$python -m venv failed (is the venv module installed?)"
  pip_install "$dir" "$log"
  verify_imports "$dir"
  local size; size=$(du -sh "$dir" | cut -f1)
  printf 'areal %s, %s, installed in %ss, %s\n' "$AREAL_VERSION" "$(basename "$dir")" "$((SECONDS - start))" "$size" \
    >"$dir/$marker_name"
  echo "    installed in $((SECONDS - start))s, $size"
}

step "AReaL $AREAL_VERSION worker server (CPU) for the conformance lane"
check_pins
key=$(cache_key)
dir=$cache/$key
if [ -f "$dir/$marker_name" ]; then
  echo "    $key: cached"
else
  install "$dir"
fi
mkdir -p "$root/.tools"
ln -sfn "$dir" "$link"
echo "    .tools/areal-worker/bin/python -m areal.infra.rpc.rpc_server"
