#!/usr/bin/env bash
# Install what ferry needs to build, test and demo, skipping whatever is already in place:
# Debian packages (scripts/apt-packages.txt), the Python venv (.venv, requirements.txt),
# Azurite (npm ci from package-lock.json), toxiproxy (Go) for the fault suite, Nextflow (unless one
# is on PATH), the release build of the worker and tools/latencyfs.
# Safe to re-run; a run with nothing to do makes no network requests apart from cargo's no-op.
#
#   scripts/setup.sh           everything
#   scripts/setup.sh --worker  only the release build of the worker (what the Dockerfile runs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

build_worker() {
  command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain (rustup) first"
  if [[ ${1:-} != --worker ]] && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
    say "adding rustfmt and clippy (make lint)"
    rustup component add rustfmt clippy >/dev/null ||
      die "make lint needs rustfmt and clippy: rustup component add rustfmt clippy"
  fi
  say "building the worker (cargo build --release)"
  cargo build --release --quiet --manifest-path worker/Cargo.toml
}
if [[ ${1:-} == --worker ]]; then
  build_worker --worker
  exit 0
fi

# --- Debian packages ----------------------------------------------------------------------
wanted=()
while IFS= read -r line || [[ -n $line ]]; do
  line=${line%%#*}
  for pkg in $line; do wanted+=("$pkg"); done
done < scripts/apt-packages.txt
# A python3 without ensurepip (Debian's own, before python3-venv) cannot make the venv.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then wanted+=(python3-venv); fi

missing=()
for pkg in ${wanted[@]+"${wanted[@]}"}; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "missing Debian packages (${missing[*]}) and no apt-get here"
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "installing ${missing[*]} needs root (or sudo)"
    sudo=(sudo)
  fi
  say "installing Debian packages: ${missing[*]}"
  "${sudo[@]+"${sudo[@]}"}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]+"${sudo[@]}"}" \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

# --- Python venv --------------------------------------------------------------------------
stamp=.venv/.requirements.installed
if ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
  # Absent, or left behind by a Python that is gone: start over.
  say "creating .venv"
  rm -rf .venv
  python3 -m venv .venv
  rm -f "$stamp"
fi
# Re-install when requirements.txt changed since the last successful install (newer, or a
# checkout that put back different contents with an older time).
if [[ ! -f $stamp || requirements.txt -nt $stamp ]] || ! cmp -s requirements.txt "$stamp"; then
  say "installing Python requirements into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  cp requirements.txt "$stamp"
else
  say "Python requirements up to date"
fi

# --- Azurite (npm) ------------------------------------------------------------------------
command -v npm >/dev/null || die "npm not found: install Node.js 20+ (Debian: nodejs npm)"
npm_stamp=node_modules/.package-lock.installed
if [[ ! -x node_modules/.bin/azurite-blob || ! -f $npm_stamp ]] || ! cmp -s package-lock.json "$npm_stamp"; then
  say "installing Azurite (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$npm_stamp"
else
  say "Azurite up to date"
fi

# --- toxiproxy (Go), the TCP fault injector of the fault suite -----------------------------
# Built from the Go module proxy into .tools/bin (gitignored); the module's cmd/server package
# is the toxiproxy-server program.
toxiproxy_version=v2.12.0
toxiproxy=.tools/bin/toxiproxy-server
if [[ ! -x $toxiproxy || "$(cat .tools/toxiproxy.version 2>/dev/null)" != "$toxiproxy_version" ]]; then
  command -v go >/dev/null || die "go not found: install Go 1.23 or later (the fault suite builds toxiproxy with it)"
  say "building toxiproxy-server $toxiproxy_version (go install)"
  mkdir -p .tools/bin
  build_dir=$(mktemp -d)
  # GOTOOLCHAIN=local: use the Go that is here rather than fetch another toolchain.
  GOBIN="$build_dir" GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
    go install "github.com/Shopify/toxiproxy/v2/cmd/server@$toxiproxy_version"
  mv "$build_dir/server" "$toxiproxy"
  rmdir "$build_dir"
  echo "$toxiproxy_version" > .tools/toxiproxy.version
else
  say "toxiproxy-server $toxiproxy_version present"
fi

# --- Nextflow -------------------------------------------------------------------------------
# A `nextflow` already on PATH is used as it is; otherwise 24.10.0 from Maven Central, run by
# scripts/nextflow.
if command -v nextflow >/dev/null; then
  say "nextflow on PATH: $(command -v nextflow)"
else
  scripts/install-nextflow.sh | sed 's/^/setup: /'
fi

# --- the worker ---------------------------------------------------------------------------
build_worker

# --- latencyfs (the NFS-like test and benchmark filesystem) --------------------------------
say "building tools/latencyfs"
make -s -C tools/latencyfs
say "done"
