#!/usr/bin/env bash
# ferry's default job, end to end on this machine: make a sample tree, migrate it into a local
# Azurite container with the Snakemake pipeline in its three phases (baseline; incremental after
# the source changed; final with checksums and the deletion of what the source lost), then
# download the container again and compare it with the source.
# Output stays in .ferry-demo/ (sample tree, pipeline reports, downloaded copy, Azurite log); it
# ends with where the HTML report is and the history's projection of a final pass started now.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ferry=worker/target/release/ferry
azurite=node_modules/.bin/azurite-blob
python=.venv/bin/python
demo=.ferry-demo
for need in "$ferry" "$azurite" "$python" .venv/bin/snakemake; do
  [[ -x $need ]] || { echo "demo: $need is missing: run 'make setup' first" >&2; exit 2; }
done

say() { printf '\n== %s\n' "$*"; }
# The name of the report in a run directory (json, md or html), from its one definition.
report() { "$python" -c 'import sys; sys.path.insert(0, "workflow/scripts"); import ferry_run_dir; print(ferry_run_dir.REPORT[sys.argv[1]])' "$1"; }

# --- a sample tree ------------------------------------------------------------------------
say "generating a sample tree in $demo/src"
rm -rf "$demo"
mkdir -p "$demo/src"
src=$demo/src
for d in $(seq -w 0 11); do
  mkdir -p "$src/docs/dir$d"
  for f in $(seq -w 0 24); do
    # Sizes vary from a few bytes to a few KiB so the tree is not uniform.
    head -c $(( (10#$d * 25 + 10#$f) * 37 % 6000 + 1 )) /dev/urandom > "$src/docs/dir$d/file$f.dat"
  done
done
mkdir -p "$src/empty-files" "$src/names/sub dir"
for i in 1 2 3 4 5; do : > "$src/empty-files/empty$i"; done
# One file of several blocks at the 4 MiB block size used below, not a round number of bytes.
head -c $(( 20 * 1024 * 1024 + 12345 )) /dev/urandom > "$src/large.bin"
for name in "with space.txt" "-leading-dash.txt" "#hash-first.txt" "ünïcödé 名前 😀.txt" \
            "100% done.txt" "q?a=b&c.txt" $'tab\there.txt' "semi;colon 'quoted'.txt" "sub dir/inner file"; do
  printf 'a file called %s\n' "$name" > "$src/names/$name"
done
files=$(find "$src" -type f | wc -l)
bytes=$(du -sb "$src" | cut -f1)
echo "$files files, $bytes bytes"

# --- Azurite on a free loopback port, with a throwaway workspace --------------------------
location=$(mktemp -d "${TMPDIR:-/tmp}/ferry-demo-azurite.XXXXXX")
az_pid=
cleanup() {
  if [[ -n $az_pid ]]; then kill "$az_pid" 2>/dev/null || true; wait "$az_pid" 2>/dev/null || true; fi
  rm -rf "$location"
}
trap cleanup EXIT

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
answers() {
  "$python" - "$1" <<'PY' >/dev/null 2>&1
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=1)
c.request("GET", "/devstoreaccount1?comp=list")
c.getresponse().read()
PY
}

say "starting Azurite"
for attempt in 1 2 3; do
  port=$(free_port)
  "$azurite" --blobHost 127.0.0.1 --blobPort "$port" --location "$location" \
    --skipApiVersionCheck --loose --disableTelemetry --silent > "$demo/azurite.log" 2>&1 &
  az_pid=$!
  for _ in $(seq 100); do
    answers "$port" && break 2
    kill -0 "$az_pid" 2>/dev/null || break  # died: most likely the port was taken meanwhile
    sleep 0.1
  done
  kill "$az_pid" 2>/dev/null || true; wait "$az_pid" 2>/dev/null || true; az_pid=
done
[[ -n $az_pid ]] || { echo "demo: Azurite did not start; see $demo/azurite.log" >&2; exit 1; }
echo "Azurite (pid $az_pid) on 127.0.0.1:$port"

# Azurite's published development account and key; FERRY_IMDS_ENDPOINT keeps any fallback local.
export AZURE_STORAGE_ACCOUNT=devstoreaccount1
export AZURE_STORAGE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
export FERRY_AUTH=key FERRY_IMDS_ENDPOINT=http://127.0.0.1:9
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
url=http://127.0.0.1:$port/devstoreaccount1/demo

snakemake=.venv/bin/snakemake
results=$demo/results

# One phase of the migration pipeline, as a user runs it (profiles/local), into $results.
phase() {
  say "pipeline, phase $1: snakemake --profile profiles/local --config source=$src dest=$url phase=$1 ${*:2}"
  local log=$demo/snakemake-$1.log
  if ! "$snakemake" --profile profiles/local \
      --config source="$src" dest="$url" phase="$1" outdir="$results" run_name=demo "${@:2}" > "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "demo: the $1 phase failed; Snakemake's log: $log" >&2
    exit 1
  fi
  # The report's totals, as a user would read them.
  sed -n '/^## Totals/,/^## Where/{/^## /d;p}' "$results/demo/$1/$(report md)" | sed '/^$/d; s/^/  /'
}

phase baseline

say "the source changes while the migration runs: 3 files added, 2 changed, 2 deleted"
for i in 1 2 3; do head -c $((i * 1000)) /dev/urandom > "$src/docs/added-$i.dat"; done
head -c 777 /dev/urandom > "$src/docs/dir00/file00.dat"
printf 'changed\n' >> "$src/names/with space.txt"
rm "$src/docs/dir01/file01.dat" "$src/empty-files/empty5"

phase incremental
phase final checksum=true

say "independent check: download the destination and compare it with the source"
"$ferry" copy "$url" "$demo/roundtrip" --recursive --no-progress
diff -r "$src" "$demo/roundtrip"
echo "  identical: $(find "$demo/roundtrip" -type f | wc -l) files"

say "results"
echo "  sample tree (the source):  $src"
echo "  reports, one per phase:    $results/demo/{baseline,incremental,final}/$(report md) (and $(report json), $(report html))"
echo "  the destination, downloaded again: $demo/roundtrip"
echo "  Azurite log:               $demo/azurite.log (Azurite is stopped and its data removed on exit)"

# What a reader opens first, and what the history says a final pass would take if started now.
say "the report as one page, and the projection"
echo "  HTML report (open it in a browser): $results/demo/final/$(report html)"
echo "  projection: $("$python" workflow/scripts/ferry_history.py project "$results/demo")"
