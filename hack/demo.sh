#!/usr/bin/env bash
# demo.sh is drakit's main job on a fresh machine: it installs what is
# needed (hack/setup.sh, cached after the first run) and brings up a local
# Kubernetes 1.37 cluster with a real node, then prints how to use it.
# Stop it with: go run ./cmd/drakit cluster down
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
"$ROOT/hack/setup.sh"
go run ./cmd/drakit cluster up "$@"
