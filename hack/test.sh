#!/usr/bin/env bash
# test.sh runs every check of drakit on a fresh machine: it installs what
# the tests need (hack/setup.sh, idempotent and cached), then lint (gofmt,
# go vet) and all tests, integration tests against a real local cluster
# included. Extra arguments go to `go test` (e.g. -run, -short). The tests'
# `go test -json` output is kept in _output/test.json; at the end the
# per-package times and the slowest tests are printed.
set -euo pipefail
# go-nvml's cgo code calls NVML functions its header marks deprecated:
# without this, the first build prints ~140 lines of compiler warnings.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
# -trimpath: the build cache's entries do not depend on the checkout's
# path, so a fresh clone builds from the cache a run in another folder
# filled. Without it each new folder recompiles drakit's packages: go vet
# 60 CPU-s instead of 2, setup's `go run` about a minute instead of 1 s, the
# test binaries 160 CPU-s instead of 75 (measured on the 2-core builder).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
# -ldflags=-w: the test binaries, and what the tests build (drivers, the
# demo's image), are linked without DWARF. Links are not cached and a run
# makes about a hundred of them; -w takes a quarter off each (a driver
# test binary: 3.9 CPU-s -> 2.9). Panics still print symbolized stacks
# (those come from the pclntab, which -w keeps); only debuggers lose.
# A build that passes -ldflags of its own overrides this.
export GOFLAGS="$GOFLAGS -ldflags=-w"
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
mkdir -p _output
go build -o _output/testtimes hack/testtimes.go
# The tests build the NVIDIA driver's image (the demo, the chart's
# end-to-end tests, the upgrade, the CUDA module's): once per run, kept
# here (examples/nvidia/deploy.ImageCacheEnv).
export DRAKIT_IMAGE_CACHE="$ROOT/_output/images"
rm -rf "$DRAKIT_IMAGE_CACHE"

# go vet runs beside the tests, at a lower priority: the tests wait on
# clusters much of the time, and vet fills the idle CPU.
say "lint: go vet (in the background)"
( nice -n 10 go vet ./... &&
  cd examples/nvidia/cuda && GOWORK=off nice -n 10 go vet ./... # a module of its own
) >_output/vet.log 2>&1 &
vet=$!

# The tests of locking and concurrency contracts run again under the race
# detector, beside the tests and at a lower priority (their names say it:
# Concurrent, AtOnce, ...; a new contract's test takes such a name).
race_run='Concurrent|AtOnce|InProcess|OneKey|OpenTwice|Parallelism|RunTwice|ReadersSeeWholeFiles'
race_run+='|TestGuard$'
say "go test -race: the concurrency contracts (in the background)"
( nice -n 10 go test -race -count=1 -run "$race_run" ./statefile ./cdi ./device ./driver \
  ./explain ./partition/lifecycle ./partition/plan ./partition/ledger ./mig \
  ./examples/nvidia/nvml/nvmlsim ./examples/nvidia/deploy \
  ./examples/nvidia/driver ) >_output/race.log 2>&1 &
race=$!

# go test starts the packages in the order given: the longest first
# (measured with hack/testtimes.go), so that none of them starts last and
# makes a long tail; packages not named here follow in path order.
# internal/cluster goes first: TestNodeUndoesHostChanges takes every node
# slot (the host with no other node) and TestTwoNodesAtOnce two of them,
# all free only at the start.
slow=(
  internal/cluster examples/nvidia/deploy cmd/drakit conformance examples/minimal testenv
  examples/nvidia/cmd/nvidia-dra-driver examples/nvidia/driver driver mig/defrag mig
  examples/nvidia/drivercmd mig/bench admission device explain partition/ledger
)
mod=$(go list -m)
mapfile -t all < <(go list ./...)
declare -A known=() named=()
for p in "${all[@]}"; do known[$p]=1; done
pkgs=()
for p in "${slow[@]}"; do
  if [ -n "${known[$mod/$p]:-}" ]; then pkgs+=("$mod/$p"); named[$mod/$p]=1; fi
done
for p in "${all[@]}"; do [ -n "${named[$p]:-}" ] || pkgs+=("$p"); done

say "go test"
# -p 4 on two cores, and three real nodes at once (internal/cluster's
# node slots; drakit's own default is two): a package often waits for a
# node slot or on its cluster, and with -p 3 and two nodes the cores were
# idle a fifth of the run (696 s, 1,062 CPU-s); with these, 590 s and
# 999 CPU-s, both cores busy throughout (measured on the 2-core builder).
export DRAKIT_NODE_SLOTS="${DRAKIT_NODE_SLOTS:-3}"
set +e
go test -p "${TEST_P:-4}" -timeout 30m -count=1 -json "$@" "${pkgs[@]}" |
  _output/testtimes -follow _output/test.json -top 25
rc=("${PIPESTATUS[@]}")
wait "$vet"
vetrc=$?
wait "$race"
racerc=$?
set -e
if [ "$vetrc" -ne 0 ]; then
  echo "go vet failed:" >&2; cat _output/vet.log >&2
fi
if [ "$racerc" -ne 0 ]; then
  echo "go test -race failed:" >&2; cat _output/race.log >&2
fi
if [ "${rc[0]}" -ne 0 ] || [ "${rc[1]}" -ne 0 ] || [ "$vetrc" -ne 0 ] || [ "$racerc" -ne 0 ]; then
  say "FAILED after $((SECONDS-t0)) s (go test exit ${rc[0]}, go vet exit $vetrc, go test -race exit $racerc; times: _output/test.json)"
  exit 1
fi
say "all checks passed in $((SECONDS-t0)) s (per-test times: _output/testtimes _output/test.json)"
