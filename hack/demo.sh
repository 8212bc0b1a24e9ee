#!/usr/bin/env bash
# demo.sh is drakit's main job on a fresh machine: it installs what is
# needed (hack/setup.sh, cached after the first run), builds the
# examples/minimal driver and runs `drakit demo`: a local Kubernetes 1.37
# cluster with a real node (kubelet, containerd, runc), the driver as a
# real process, a pod that gets a device through a ResourceClaimTemplate,
# a pod that asks the old way (resources.limits minimal.drakit.dev/device: 1)
# and one that waits until a device frees. Everything it starts is stopped
# at the end; logs stay in ~/.cache/drakit/demo/logs. For a cluster that
# stays up: go run ./cmd/drakit cluster up (and cluster down).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
"$ROOT/hack/setup.sh"
mkdir -p _output
go build -o _output/minimal ./examples/minimal
go build -o _output/drakit ./cmd/drakit
exec _output/drakit demo --driver-bin _output/minimal "$@"
