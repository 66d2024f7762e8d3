#!/usr/bin/env bash
# Karpenter's own scheduling benchmark, built from its module and run on this machine, for the
# side-by-side table in benchmarks/README.md ("Measured side by side").
#
#   benchmarks/karpenter-go.sh [VERSION] [SIZES]     e.g. benchmarks/karpenter-go.sh v1.15.0 1000,20000
#
# Needs the Go toolchain and the Go module proxy. A module whose go directive asks for a newer
# patch release than the local toolchain gets the local one written in (GOTOOLCHAIN=local): the
# benchmark's code is unchanged.
set -euo pipefail
version=${1:-v1.15.0}
sizes=${2:-1,50,100,500,1000,2000,5000,10000,20000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
# The download succeeds even when the go directive is newer than the toolchain; the exit status
# then reports that, so only the zip's path is read.
json=$(go mod download -json "sigs.k8s.io/karpenter@$version" || true)
zip=$(sed -n 's/.*"Zip": "\(.*\)",/\1/p' <<<"$json")
[[ -n "$zip" ]] || { echo "could not download sigs.k8s.io/karpenter@$version" >&2; exit 1; }
(cd "$work" && unzip -q "$zip")
module="$work/sigs.k8s.io/karpenter@$version"
chmod -R u+w "$module"
local_go=$(go env GOVERSION | sed 's/^go//')
sed -i "s/^go [0-9.]*$/go $local_go/; /^toolchain /d" "$module/go.mod"
(cd "$module" && go test -c -tags=test_performance -o "$work/scheduling.test" ./pkg/controllers/provisioning/scheduling/)
cd "$module/pkg/controllers/provisioning/scheduling"
for size in ${sizes//,/ }; do
    # Small sizes repeat for a second; large ones run once (20,000 pods take minutes).
    if ((size <= 2000)); then benchtime=1s; else benchtime=1x; fi
    "$work/scheduling.test" -test.run=XXX -test.bench="^BenchmarkScheduling${size}\$" -test.benchtime=$benchtime |
        grep '^Benchmark'
done
