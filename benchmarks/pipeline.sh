#!/usr/bin/env bash
# The pipelines' own cost: Snakemake (--profile profiles/local) and Nextflow (-profile local),
# a baseline of 20,000 files of 0–32 KiB local → local against one `ferry copy` of the same tree,
# and an incremental pass with nothing changed (start-up, listings, plan, report: no transfer)
# against one `ferry verify`. hyperfine, 3 runs each; results as ratios, with the start-up and
# per-task overhead they imply, in benchmarks/results/pipeline.md.   Usage: benchmarks/pipeline.sh [RUNS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${1:-3}
ferry=worker/target/release/ferry
snakemake=.venv/bin/snakemake
data=benchmarks/.data/pipeline
src=$data/src dst=$data/dst out=$data/results
mkdir -p "$data" benchmarks/results

if [[ ! -d $src ]]; then
  # Deterministic: the same tree on every machine.
  .venv/bin/python - "$src" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(20000)
for i in range(20000):
    d = os.path.join(root, f"d{i % 100:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
        f.write(rng.randbytes(rng.randrange(0, 32 * 1024 + 1)))
PY
fi
nextflow=$(command -v nextflow || echo scripts/nextflow)
snakemake_run() { echo "$snakemake --profile profiles/local --quiet all --config source=$src dest=$dst outdir=$out/snakemake run_name=bench phase=$1"; }
nextflow_run() { echo "$nextflow -q run main.nf -profile local -w $data/nf-work --source $src --dest $dst --outdir $out/nextflow --run_name bench --phase $1"; }

# Each engine's last report is kept: it says how many tasks ran.
keep_reports() { mkdir -p "$data/reports"; for e in snakemake nextflow; do cp "$out/$e/bench/$1/report.json" "$data/reports/$e-$1.json"; done; }

hyperfine --runs "$runs" --style basic --export-json "$data/baseline.json" \
  --prepare "rm -rf $dst" -n "ferry copy" "$ferry copy -r $src $dst" \
  --prepare "rm -rf $dst $out/snakemake" -n "snakemake baseline" "$(snakemake_run baseline)" \
  --prepare "rm -rf $dst $out/nextflow $data/nf-work" -n "nextflow baseline" "$(nextflow_run baseline)"
keep_reports baseline

# A destination in sync, then: nothing changed.
rm -rf "$dst" "$out" && $ferry copy -r "$src" "$dst" > /dev/null 2>&1
hyperfine --runs "$runs" --style basic --export-json "$data/incremental.json" \
  --prepare true -n "ferry verify" "$ferry verify $src $dst" \
  --prepare "rm -rf $out/snakemake/bench/incremental" -n "snakemake incremental" "$(snakemake_run incremental)" \
  --prepare "rm -rf $out/nextflow/bench/incremental $data/nf-work" -n "nextflow incremental" "$(nextflow_run incremental)"
keep_reports incremental

.venv/bin/python - "$data" benchmarks/results/pipeline.md "$(uptime | sed 's/.*load average: //')" <<'PY'
import datetime, json, statistics, sys
data, out, load = sys.argv[1:]
rows, ratios = [], []
for name, peer in (("baseline", "ferry copy"), ("incremental", "ferry verify")):
    res = {r["command"]: r for r in json.load(open(f"{data}/{name}.json"))["results"]}
    med = {k: statistics.median(v["times"]) for k, v in res.items()}
    for k, v in res.items():
        rows.append(f"| {name} | {k} | {med[k]:.2f} | {min(v['times']):.2f}–{max(v['times']):.2f} | {v['user'] + v['system']:.2f} |")
    for engine in ("snakemake", "nextflow"):
        # Tasks of the last measured run, from its own report (report.json counts jobs per step).
        report = json.load(open(f"{data}/reports/{engine}-{name}.json"))
        tasks = sum(s["jobs"] for s in report["time"]["per_rule"].values()) + 1  # and the report itself
        extra = med[f"{engine} {name}"] - med[peer]
        ratios.append(f"| {name} | {engine} | {med[f'{engine} {name}'] / med[peer]:.2f} | {extra:.1f} | {tasks} | {extra / tasks:.2f} |")
text = f"""# Pipeline overhead (20,000 files of 0–32 KiB, local → local, one machine)

Measured {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, load average {load}.
Reproduce: `benchmarks/pipeline.sh` (hyperfine, 3 runs; medians). Snakemake `--profile profiles/local`,
Nextflow `-profile local`; both run the same ferry commands (one partition at the default caps).

| scenario | engine | engine ÷ ferry alone (wall) | extra s | tasks | extra s per task |
|---|---|---:|---:|---:|---:|
{chr(10).join(ratios)}

The peer is one `ferry copy -r` (baseline) or one `ferry verify` (incremental, nothing changed).
"extra s per task" spreads the engine's whole overhead (start-up, scheduling, per-task wrappers,
the listing/plan/report steps) over the tasks it ran: an upper bound on the cost of one more task.

| scenario | command | wall s (median) | min–max | CPU s (mean) |
|---|---|---:|---:|---:|
{chr(10).join(rows)}
"""
open(out, "w").write(text)
print(text)
PY
