#!/usr/bin/env bash
# ferry's default job, end to end on this machine: make a sample tree, copy it into a local
# Azurite container and back, verify both legs by checksum and compare the trees.
# Output stays in .ferry-demo/ (sample tree, round-tripped tree, JSON summaries, Azurite log).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ferry=worker/target/release/ferry
azurite=node_modules/.bin/azurite-blob
python=.venv/bin/python
demo=.ferry-demo
for need in "$ferry" "$azurite" "$python"; do
  [[ -x $need ]] || { echo "demo: $need is missing: run 'make setup' first" >&2; exit 2; }
done

say() { printf '\n== %s\n' "$*"; }

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

summary() {  # print one line from a copy/verify --json file
  "$python" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if d.get("command") == "copy":
    f, b = d["files"], d["bytes"]
    print(f"  copied {f['copied']}/{f['total']} files, {b['copied']} bytes, {f['failed']} failed, "
          f"{d['retries']['total']} retries, {d['seconds']:.2f} s")
else:
    print(f"  same {d['same']}, differ {d['differ']}, missing on dst {d['missing_on_dst']}, "
          f"missing on src {d['missing_on_src']}, errors {d['error']}")
PY
}

say "ferry mk $url"
"$ferry" mk "$url"

# Run a ferry command that writes --json to $1, then print its summary; stop the demo if it failed.
ferry_json() {
  local out=$1; shift
  local rc=0
  "$ferry" "$@" --json > "$out" || rc=$?
  if [[ -s $out ]]; then summary "$out"; fi
  if ((rc != 0)); then echo "demo: 'ferry $*' exited $rc (output in $out)" >&2; exit "$rc"; fi
}

say "upload: ferry copy $src/ $url"
ferry_json "$demo/upload.json" copy "$src/" "$url" --recursive --block-size 4MiB

say "verify the upload by checksum"
ferry_json "$demo/verify-upload.json" verify "$src/" "$url" --checksum

say "download: ferry copy $url $demo/roundtrip"
ferry_json "$demo/download.json" copy "$url" "$demo/roundtrip" --recursive

say "verify the download by checksum"
ferry_json "$demo/verify-download.json" verify "$url" "$demo/roundtrip" --checksum

say "diff -r $src $demo/roundtrip"
diff -r "$src" "$demo/roundtrip"
echo "  identical"

say "results"
echo "  sample tree:       $demo/src"
echo "  round-tripped:     $demo/roundtrip"
echo "  JSON summaries:    $demo/upload.json $demo/verify-upload.json $demo/download.json $demo/verify-download.json"
echo "  Azurite log:       $demo/azurite.log (Azurite is stopped and its data removed on exit)"
