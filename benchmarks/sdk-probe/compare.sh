#!/usr/bin/env bash
# ferry's own Blob REST client vs the official Azure SDK for Rust (sdk-probe), measured the same
# way on the same machine. Produces the numbers in docs/design/azure-client.md.
#
#   benchmarks/sdk-probe/compare.sh [--runs N] [--sizes "300 1024"] [--skip-builds]
#                                   [--skip-discard] [--work DIR] [--keep]
#
# Needs: worker/target/release/ferry (make build), node_modules (npm ci), cargo, python3,
# curl, /usr/bin/time; go for the optional discard-server section. Writes a TSV of every run
# and a markdown summary to benchmarks/sdk-probe/results/; summarize.py pools several passes.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUNS=3
SIZES="300 1024"
BUILDS=1
DISCARD=1
WORK=""
KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --skip-builds) BUILDS=0; shift ;;
        --skip-discard) DISCARD=0; shift ;;
        --work) WORK=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n 2,10p "$0"; exit 0 ;;
        *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

FERRY=$ROOT/worker/target/release/ferry
PROBE=$HERE/target/release/sdk-probe
AZURITE=$ROOT/node_modules/.bin/azurite-blob
TIME=/usr/bin/time
# One source of truth for Azurite's published development key (not a secret).
KEY=$(sed -n 's/^KEY = "\(.*\)"$/\1/p' "$ROOT/tests/support/azurite.py")
[ -n "$KEY" ] || { echo "compare.sh: no Azurite key in tests/support/azurite.py" >&2; exit 2; }
for f in "$FERRY" "$AZURITE" "$TIME"; do
    [ -x "$f" ] || { echo "compare.sh: missing $f" >&2; exit 2; }
done
export AZURE_STORAGE_ACCOUNT=devstoreaccount1 AZURE_STORAGE_KEY=$KEY FERRY_AUTH=key
# The same transfer shape for both tools, spelled out rather than left to either's defaults.
CONC=8
BLOCK=4MiB
RANGE=16MiB

START=$(date +%s)
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/ferry-sdk-compare.XXXXXX)
mkdir -p "$WORK"
STAMP=$(date +%Y%m%dT%H%M%S)
mkdir -p "$HERE/results"
TSV=$HERE/results/compare-$STAMP.tsv
SUMMARY=$HERE/results/compare-$STAMP.md

AZ_PID=""
DISCARD_PID=""
cleanup() {
    stop_azurite
    if [ -n "$DISCARD_PID" ]; then kill "$DISCARD_PID" 2>/dev/null || true; wait "$DISCARD_PID" 2>/dev/null || true; fi
    if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
load1() { cut -d' ' -f1 /proc/loadavg; }

start_azurite() { # DIR: a fresh emulator on a free port, its data in DIR
    AZ_PORT=$(free_port)
    "$AZURITE" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" --location "$1" --skipApiVersionCheck \
        --loose --disableTelemetry --silent >"$WORK/azurite.log" 2>&1 &
    AZ_PID=$!
    for _ in $(seq 100); do
        if curl -s -o /dev/null "http://127.0.0.1:$AZ_PORT/devstoreaccount1?comp=list"; then
            BASE=http://127.0.0.1:$AZ_PORT/devstoreaccount1/bench
            return 0
        fi
        sleep 0.1
    done
    echo "compare.sh: Azurite did not answer; log:" >&2; cat "$WORK/azurite.log" >&2; exit 1
}

stop_azurite() {
    [ -n "$AZ_PID" ] || return 0
    # SIGTERM lets Azurite save its database, which the download seeds depend on.
    kill "$AZ_PID" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$AZ_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$AZ_PID" 2>/dev/null || true
    wait "$AZ_PID" 2>/dev/null || true
    AZ_PID=""
}

# CPU seconds a server process has used so far. Its difference over a run is the server side of
# that run, which shows whether one client makes the emulator work harder (e.g. a block sent
# without Content-MD5 sends Azurite down its JavaScript CRC64 path).
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

echo -e "op\tsize_mib\ttool\trun\tposition\twall_s\tuser_s\tsys_s\tpeak_rss_kib\tserver_cpu_s\tload1" >"$TSV"

# measure OP SIZE TOOL RUN POS SERVER_PID -- COMMAND...: one timed run, appended to the TSV.
measure() {
    local op=$1 size=$2 tool=$3 run=$4 pos=$5 spid=$6
    shift 7
    local load c0 c1 tf=$WORK/time.out
    load=$(load1)
    c0=$(cpu_of "$spid")
    if ! "$TIME" -f '%e %U %S %M' -o "$tf" "$@" >"$WORK/run.log" 2>&1; then
        echo "compare.sh: $tool $op failed:" >&2; cat "$WORK/run.log" >&2; exit 1
    fi
    c1=$(cpu_of "$spid")
    read -r wall user sys rss <"$tf"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$op" "$size" "$tool" "$run" "$pos" \
        "$wall" "$user" "$sys" "$rss" "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" "$load" >>"$TSV"
    printf '  %-20s %5s MiB  %-14s run %s: %6ss wall, %5ss user, %5ss sys, %7s KiB peak RSS\n' \
        "$op" "$size" "$tool" "$run" "$wall" "$user" "$sys" "$rss"
}

# order RUN TOOLS...: the tools rotated by the run number, so each takes each position in turn.
order() { local r=$1; shift; local t=("$@") n=$#; for i in $(seq 0 $((n - 1))); do echo "${t[$(((i + r - 1) % n))]}"; done; }

# ---------------------------------------------------------------------------------------------
echo "== probe build (for the timed runs; the clean build is timed separately below)"
cargo build --release --locked --quiet --manifest-path "$HERE/Cargo.toml"

if [ "$BUILDS" = 1 ]; then
    echo "== clean release builds (dependencies fetched first: build time, not download time)"
    BUILD_TSV=$HERE/results/builds-$STAMP.tsv
    echo -e "project\tclean_build_s\tbuild_cpu_s\tload1_before\tbinary_bytes\tstripped_bytes\tcrates_brief_cmd\tcrates_unique\tcrates_normal_unique" >"$BUILD_TSV"
    cargo fetch --locked --quiet --manifest-path "$ROOT/worker/Cargo.toml"
    cargo fetch --locked --quiet --manifest-path "$HERE/Cargo.toml"
    for proj in ferry sdk-probe; do
        if [ "$proj" = ferry ]; then man=$ROOT/worker/Cargo.toml; bin=ferry; else man=$HERE/Cargo.toml; bin=sdk-probe; fi
        # A private target dir: a clean build without wiping the shared worker/target.
        tdir=$WORK/build-$proj
        rm -rf "$tdir"
        load=$(load1)
        # CPU seconds too: on a shared machine they move far less with the load than wall time.
        "$TIME" -f '%e %U %S' -o "$WORK/build.time" env CARGO_TARGET_DIR="$tdir" \
            cargo build --release --locked --quiet --manifest-path "$man"
        read -r secs bu bs <"$WORK/build.time"
        bcpu=$(awk -v a="$bu" -v b="$bs" 'BEGIN { printf "%.0f", a + b }')
        bytes=$(stat -c %s "$tdir/release/$bin")
        strip -o "$WORK/$bin.stripped" "$tdir/release/$bin"
        sbytes=$(stat -c %s "$WORK/$bin.stripped")
        # The brief's count counts a crate twice when cargo tree marks a repeat with "(*)";
        # the second count strips that marker, the third leaves out dev- and build-only crates.
        brief=$(cargo tree --locked --manifest-path "$man" --prefix none | sort -u | wc -l)
        cargo tree --locked --manifest-path "$man" --prefix none | sed 's/ (\*)$//; s/ (proc-macro)$//' | sort -u >"$WORK/crates-$proj.txt"
        uniq_all=$(wc -l <"$WORK/crates-$proj.txt")
        normal=$(cargo tree --locked --manifest-path "$man" --prefix none -e normal | sed 's/ (\*)$//; s/ (proc-macro)$//' | sort -u | wc -l)
        echo -e "$proj\t$secs\t$bcpu\t$load\t$bytes\t$sbytes\t$brief\t$uniq_all\t$normal" >>"$BUILD_TSV"
        echo "  $proj: clean build ${secs}s wall, ${bcpu}s CPU (load $load before), binary $bytes B ($sbytes B stripped), crates $brief by the brief's command, $uniq_all unique, $normal unique without dev/build-only"
        rm -rf "$tdir"
    done
    # What adopting the SDK would add to ferry's tree: the probe's crates ferry does not already
    # build, by name and version (ferry's own root excluded on the other side).
    comm -13 <(sed 's/ (.*)$//' "$WORK/crates-ferry.txt" | sort -u) <(sed 's/ (.*)$//' "$WORK/crates-sdk-probe.txt" | sort -u) |
        grep -v '^sdk-probe ' >"$HERE/results/crates-new-to-ferry-$STAMP.txt" || true
    echo "  crates the SDK would add to ferry's build: $(wc -l <"$HERE/results/crates-new-to-ferry-$STAMP.txt") (list in results/crates-new-to-ferry-$STAMP.txt)"
fi

# ---------------------------------------------------------------------------------------------
echo "== data"
mkdir -p "$WORK/data"
declare -A MD5
for s in $SIZES; do
    head -c "$((s * 1024 * 1024))" /dev/urandom >"$WORK/data/f$s"
    MD5[$s]=$(md5sum "$WORK/data/f$s" | cut -d' ' -f1)
    echo "  f$s: ${MD5[$s]}"
done

check_blob() { # SIZE: the committed blob has the file's size and its MD5 as Content-MD5
    local line
    line=$("$FERRY" ls "$BASE" | grep -P "^f$1\t")
    [ "$(cut -f3 <<<"$line")" = "$(($1 * 1024 * 1024))" ] && [ "$(cut -f5 <<<"$line")" = "${MD5[$1]}" ] ||
        { echo "compare.sh: blob f$1 wrong after upload: $line" >&2; exit 1; }
}

echo "== uploads to Azurite (fresh emulator for every run)"
for s in $SIZES; do
    for r in $(seq "$RUNS"); do
        pos=0
        for tool in $(order "$r" ferry sdk-probe); do
            pos=$((pos + 1))
            rm -rf "$WORK/az"
            start_azurite "$WORK/az"
            "$FERRY" mk "$BASE" >/dev/null 2>&1
            if [ "$tool" = ferry ]; then
                measure upload "$s" ferry "$r" "$pos" "$AZ_PID" -- "$FERRY" copy "$WORK/data/f$s" "$BASE/f$s" \
                    --concurrency "$CONC" --block-size "$BLOCK" --no-progress
            else
                measure upload "$s" sdk-probe "$r" "$pos" "$AZ_PID" -- "$PROBE" upload "$WORK/data/f$s" "$BASE/f$s" \
                    --concurrency "$CONC" --block-size "$BLOCK"
            fi
            check_blob "$s"
            stop_azurite
        done
    done
done
rm -rf "$WORK/az"

echo "== downloads from Azurite (fresh emulator restored from a seeded copy for every run)"
for s in $SIZES; do
    start_azurite "$WORK/seed-$s"
    "$FERRY" mk "$BASE" >/dev/null 2>&1
    "$FERRY" copy "$WORK/data/f$s" "$BASE/f$s" --no-progress >/dev/null 2>&1
    check_blob "$s"
    stop_azurite
done
for s in $SIZES; do
    for r in $(seq "$RUNS"); do
        pos=0
        for tool in $(order "$r" ferry sdk-probe sdk-managed); do
            pos=$((pos + 1))
            rm -rf "$WORK/az" "$WORK/dl"
            cp -a "$WORK/seed-$s" "$WORK/az"
            mkdir -p "$WORK/dl"
            start_azurite "$WORK/az"
            case $tool in
                ferry) measure download "$s" ferry "$r" "$pos" "$AZ_PID" -- "$FERRY" copy "$BASE/f$s" "$WORK/dl/" \
                    --concurrency "$CONC" --block-size "$BLOCK" --no-progress ;;
                sdk-probe) measure download "$s" sdk-probe "$r" "$pos" "$AZ_PID" -- "$PROBE" download "$BASE/f$s" "$WORK/dl/f$s" \
                    --concurrency "$CONC" --range-size "$RANGE" ;;
                sdk-managed) measure download "$s" sdk-managed "$r" "$pos" "$AZ_PID" -- "$PROBE" download "$BASE/f$s" "$WORK/dl/f$s" \
                    --concurrency "$CONC" --range-size "$RANGE" --managed ;;
            esac
            got=$(md5sum "$WORK/dl/f$s" | cut -d' ' -f1)
            [ "$got" = "${MD5[$s]}" ] || { echo "compare.sh: $tool downloaded a wrong f$s ($got)" >&2; exit 1; }
            stop_azurite
        done
    done
done
rm -rf "$WORK/az" "$WORK/dl"

if [ "$DISCARD" = 1 ] && command -v go >/dev/null && [ -f "$ROOT/benchmarks/discard/main.go" ]; then
    # Azurite caps every client at the same rate; a server that reads and drops the bytes shows
    # how fast each client itself can push them (the ceiling that matters against real Azure).
    echo "== uploads to the discard server (client ceiling), with and without MD5"
    (cd "$ROOT/benchmarks/discard" && GOFLAGS=-mod=mod go build -o "$WORK/discard" .)
    # Without MD5 (ferry --no-put-md5 --no-block-md5, probe --no-md5) both tools are left with
    # reading the file and the HTTP stack, so any cost difference between the stacks shows.
    for variant in md5 nomd5; do
        if [ "$variant" = md5 ]; then op=upload-discard; fflags=(); pflags=(); else
            op=upload-discard-nomd5; fflags=(--no-put-md5 --no-block-md5); pflags=(--no-md5); fi
        for s in $SIZES; do
            for r in $(seq "$RUNS"); do
                pos=0
                for tool in $(order "$r" ferry sdk-probe); do
                    pos=$((pos + 1))
                    # Removed first: the background redirect truncates it only once the child runs,
                    # and the last run's port must not be read in between.
                    rm -f "$WORK/discard.log"
                    "$WORK/discard" -addr 127.0.0.1:0 >"$WORK/discard.log" 2>&1 &
                    DISCARD_PID=$!
                    for _ in $(seq 100); do grep -q '^listening' "$WORK/discard.log" 2>/dev/null && break; sleep 0.05; done
                    dport=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$WORK/discard.log")
                    dbase=http://127.0.0.1:$dport/devstoreaccount1/bench
                    if [ "$tool" = ferry ]; then
                        measure "$op" "$s" ferry "$r" "$pos" "$DISCARD_PID" -- "$FERRY" copy "$WORK/data/f$s" "$dbase/f$s" \
                            --concurrency "$CONC" --block-size "$BLOCK" --no-progress "${fflags[@]}"
                    else
                        measure "$op" "$s" sdk-probe "$r" "$pos" "$DISCARD_PID" -- "$PROBE" upload "$WORK/data/f$s" "$dbase/f$s" \
                            --concurrency "$CONC" --block-size "$BLOCK" "${pflags[@]}"
                    fi
                    got=$(curl -s "http://127.0.0.1:$dport/__stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["body_bytes"])')
                    [ "$got" -ge "$((s * 1024 * 1024))" ] || { echo "compare.sh: discard server got only $got bytes from $tool" >&2; exit 1; }
                    kill "$DISCARD_PID"; wait "$DISCARD_PID" 2>/dev/null || true; DISCARD_PID=""
                done
            done
        done
    done
fi

# ---------------------------------------------------------------------------------------------
if [ -n "${BUILD_TSV:-}" ]; then
    python3 "$HERE/summarize.py" "$TSV" --builds "$BUILD_TSV" | tee "$SUMMARY"
else
    python3 "$HERE/summarize.py" "$TSV" | tee "$SUMMARY"
fi
echo
echo "runs: $TSV"
echo "summary: $SUMMARY"
echo "compare.sh took $(( $(date +%s) - START )) s"
