#!/usr/bin/env bash
# test.sh runs every check of drakit on a fresh machine: it installs what
# the tests need (hack/setup.sh, idempotent and cached), then lint (gofmt,
# go vet) and all tests, integration tests against a real local cluster
# included. Extra arguments go to `go test` (e.g. -run, -short).
set -euo pipefail
# go-nvml's cgo code calls NVML functions its header marks deprecated:
# without this, the first build prints ~140 lines of compiler warnings.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
t0=$SECONDS

"$ROOT/hack/setup.sh"

say "lint: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go') 2>&1 || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change these files:" >&2; echo "$unformatted" >&2; exit 1
fi
"$ROOT/hack/linewidth.sh" # examples/: lines of at most 100 columns
say "lint: go vet"
go vet ./...
(cd examples/nvidia/cuda && GOWORK=off go vet ./...) # a module of its own (nvidia-container-toolkit)

say "go test"
# -p 2: the machines have two cores; a real node is taken by one test
# package at a time (a host-wide lock), control planes run side by side.
go test -p 2 -timeout 30m -count=1 "$@" ./...
say "all checks passed in $((SECONDS-t0)) s"
