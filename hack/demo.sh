#!/usr/bin/env bash
# demo.sh is drakit's main job on a fresh machine: it installs what is
# needed (hack/setup.sh: the cluster's binaries and Helm, cached after the
# first run) and runs `drakit demo`: a local Kubernetes 1.37 cluster with a
# real node (kubelet, containerd, runc), drakit's reference NVIDIA DRA
# driver (examples/nvidia) on a simulated DGX H200, deployed as users
# deploy it (its image built from the static binary and imported into the
# node's containerd, its Helm chart installed with helm), pods that get
# full GPUs and MIG devices by claim and the old way (nvidia.com/gpu: 1),
# a picture of every GPU's MIG layout after each step, a driver restart,
# and the conformance suite against the installed driver. Everything it
# starts is stopped at the end; logs stay in ~/.cache/drakit/demo/logs.
# Arguments go to drakit demo; -driver=minimal runs the earlier demo of
# examples/minimal. For a cluster that stays up: go run ./cmd/drakit
# cluster up (and cluster down).
set -euo pipefail
# go-nvml's cgo code calls NVML functions its header marks deprecated:
# without this, the first build prints ~140 lines of compiler warnings.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
"$ROOT/hack/setup.sh"
mkdir -p _output
go build -o _output/drakit ./cmd/drakit
for a in "$@"; do
  case "$a" in
    -driver=minimal|--driver=minimal)
      go build -o _output/minimal ./examples/minimal
      exec _output/drakit demo --driver-bin _output/minimal "$@" ;;
  esac
done
exec _output/drakit demo "$@"
