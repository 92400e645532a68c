#!/usr/bin/env bash
# Install Nextflow 24.10.0 for scripts/nextflow when no `nextflow` is on PATH: its runtime jars
# are resolved from Maven Central into .nextflow-runtime/lib (git-ignored). Nextflow's own
# launcher would download its jar from a site that is not always reachable; Maven Central is.
# Needs java (17+) and mvn, both from Debian (scripts/apt-packages.txt). Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=24.10.0
runtime=.nextflow-runtime
stamp=$runtime/lib/.installed-$version
if [[ -f $stamp ]]; then
  echo "install-nextflow: Nextflow $version present in $runtime"
  exit 0
fi
command -v mvn >/dev/null || { echo "install-nextflow: mvn not found (Debian: maven)" >&2; exit 1; }
rm -rf "$runtime/lib.tmp"
mkdir -p "$runtime"
# Into a temporary directory first: an interrupted download never looks installed.
mvn -B -q -f scripts/nextflow-runtime/pom.xml dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$PWD/$runtime/lib.tmp"
ls "$runtime/lib.tmp"/nextflow-$version.jar >/dev/null
rm -rf "$runtime/lib"
mv "$runtime/lib.tmp" "$runtime/lib"
touch "$stamp"
echo "install-nextflow: Nextflow $version installed in $runtime ($(ls "$runtime/lib" | wc -l) jars)"
