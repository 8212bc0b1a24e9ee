#!/usr/bin/env bash
# gpu-check.sh is the real-GPU check of examples/nvidia/nvml. It only
# reads: discovery, MIG mode, GPU instance profiles and placements, the
# instances that exist, a 2-second health watch, and the comparison of
# every GPU's profiles with the mig catalog. It never changes MIG mode,
# creates or destroys an instance, or resets a GPU.
#
#   examples/nvidia/nvml/gpu-check.sh build   # here, no GPU needed: _output/gpucheck/
#   examples/nvidia/nvml/gpu-check.sh run     # on the GPU machine (prebuilt binaries, no Go needed)
#
# "run" writes its report to $OUT (or _output/gpucheck/) as well as stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BIN="$ROOT/_output/gpucheck"
case "${1:-}" in
build)
  mkdir -p "$BIN"
  cd "$ROOT"
  CGO_ENABLED=1 go test -c -o "$BIN/nvml.test" ./examples/nvidia/nvml
  CGO_ENABLED=1 go build -o "$BIN/nvml-probe" ./examples/nvidia/nvml/cmd/nvml-probe
  ls -l "$BIN"
  ;;
run)
  if [ ! -e /dev/nvidiactl ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1'; then
    echo "gpu-check: no NVIDIA GPU driver on this machine (no /dev/nvidiactl, no libnvidia-ml.so.1): nothing to check"
    exit 0
  fi
  out="${OUT:-$BIN}"
  mkdir -p "$out"
  {
    echo "== nvidia-smi"; (nvidia-smi -L && nvidia-smi mig -lgip && nvidia-smi mig -lgipp) 2>&1 || true
    echo "== nvml-probe"; "$BIN/nvml-probe" 2>&1 || echo "nvml-probe exit $?"
    echo "== TestRealBackendReadOnly"; "$BIN/nvml.test" -test.run '^TestRealBackendReadOnly$' -test.v -test.count=1 2>&1 || echo "test exit $?"
  } | tee "$out/gpu-check.txt"
  ;;
*)
  echo "usage: $0 build|run" >&2; exit 2 ;;
esac
