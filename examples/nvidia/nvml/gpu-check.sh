#!/usr/bin/env bash
# gpu-check.sh is the real-GPU check of the reference NVIDIA driver. It
# only reads: it never changes MIG mode, creates or destroys an instance,
# or resets a GPU. One command, at most five minutes:
#
#   examples/nvidia/nvml/gpu-check.sh         # on a GPU machine with Go: builds what is missing, then runs
#   _output/gpucheck/gpu-check.sh             # on the GPU node, from the folder "build" made (no Go needed)
#   examples/nvidia/nvml/gpu-check.sh build   # here, no GPU needed: _output/gpucheck/ (binaries and this script)
#
# It prints, and writes to $OUT (or the binaries' folder) as gpu-check.txt:
#   - first, what decides the driver's alpha gates DynamicMIG and
#     DynamicMIGWholeGPU on this node, per GPU (architecture and compute
#     capability, MIG mode and whether turning it on or off needs a GPU
#     reset, the nvidia-caps device of /proc, the processes holding the
#     GPU, a vGPU guest) and which GPUs each gate could serve: the gates
#     go beta once this check has passed on a Hopper node;
#   - nvidia-smi's view (GPUs, MIG profiles and placements);
#   - nvidia-dra-driver -check: the image's own driver binary (with the
#     CUDA container edits of nvidia-container-toolkit's nvcdi) runs its
#     discovery behind a read-only NVML and prints, per GPU, the devices
#     it would publish (attributes, capacities, counters) and the CDI
#     spec it would write for a claim on a full GPU or an existing MIG
#     device;
#   - nvml-probe and TestRealBackendReadOnly: the NVML layer alone, with
#     every GPU's profiles compared with the mig catalog;
#   - readelf -d of the node's libnvidia-ml.so.1: the libraries it needs
#     (NEEDED), which the driver's image must carry;
#   - the container made from the driver's own CDI spec, for each GPU's
#     full GPU or existing MIG device: -check writes the specs
#     (-check-cdi-dir), gpu-container makes a container of the driver's
#     image (image.tar, built here) with a spec's edits applied by the
#     CDI library (device nodes, mounts, env, nvidia-cdi-hook hooks), runs
#     it with runc (RUNC, default runc from PATH), and cuda-probe in it
#     dlopens libcuda.so.1 and prints cuInit, cuDeviceGetCount and
#     cuDeviceGetName. The hooks are the image's nvidia-cdi-hook unless
#     NVIDIA_CDI_HOOK names the node's. TestContainerFromDriverSpec
#     (examples/nvidia/cuda) runs this half without a GPU.
# Each step gets what is left of the five minutes (a step cut short says
# so), and the gates come first.
# The driver root is DRIVER_ROOT (default /; /run/nvidia/driver for the
# GPU Operator's driver); STATE_DIR is the running driver's state folder
# (default the chart's /run/nvidia-dra-driver), read for which GPUs are
# dynamic MIG GPUs. Further arguments go to nvidia-dra-driver -check, e.g.
# -dynamic-mig-gpus=none or -mig-profiles=1g.18gb,3g.71gb, or
# -mig-publication=layout for the dynamic GPUs as the chart's layout
# publication publishes them (the binary's default is placements).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." 2>/dev/null && pwd || true)
BIN="$ROOT/_output/gpucheck"
# build copies this script next to the binaries: copy that one folder to
# the GPU node and run it there.
if [ -x "$HERE/nvidia-dra-driver" ]; then BIN="$HERE"; fi
export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations"
case "${1:-}" in
build)
  mkdir -p "$BIN"
  cd "$ROOT"
  CGO_ENABLED=1 go test -c -o "$BIN/nvml.test" ./examples/nvidia/nvml
  CGO_ENABLED=1 go build -o "$BIN/nvml-probe" ./examples/nvidia/nvml/cmd/nvml-probe
  (cd examples/nvidia/cuda && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=1 go build -o "$BIN/nvidia-dra-driver" ./cmd/nvidia-dra-driver)
  go build -o "$BIN/gpu-container" ./examples/nvidia/gpucheck/cmd/gpu-container
  go run ./cmd/drakit image -o "$BIN/image.tar"
  "$BIN/gpu-container" -build-probe "$BIN/cuda-probe"
  cp "$HERE/gpu-check.sh" "$BIN/"
  ls -l "$BIN"
  ;;
run | "")
  [ $# -gt 0 ] && shift
  droot="${DRIVER_ROOT:-/}"
  if [ ! -e "$droot/dev/nvidiactl" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1'; then
    echo "gpu-check: no NVIDIA GPU driver on this machine (no ${droot%/}/dev/nvidiactl, no libnvidia-ml.so.1): nothing to check"
    exit 0
  fi
  if [ ! -x "$BIN/nvidia-dra-driver" ] && [ -n "$ROOT" ] && [ -f "$ROOT/go.mod" ] && command -v go >/dev/null; then
    "$0" build >&2
  fi
  out="${OUT:-$BIN}"
  mkdir -p "$out"
  deadline=$(( $(date +%s) + ${GPU_CHECK_SECONDS:-290} ))
  # left: the seconds left of the check's time (at least 1).
  left() { local l=$(( deadline - $(date +%s) )); [ "$l" -gt 0 ] && echo "$l" || echo 1; }
  cdir="$out/cdi-check"; rm -rf "$cdir"; mkdir -p "$cdir"
  hook="${NVIDIA_CDI_HOOK:-}"
  if [ -z "$hook" ]; then
    hook="$out/nvidia-cdi-hook"
    timeout "$(left)" "$BIN/gpu-container" -extract-hook "$hook" -image "$BIN/image.tar" >"$out/hook.log" 2>&1 \
      || echo "gpu-container -extract-hook exit $? (log: $out/hook.log)" >&2
  fi
  # One run of -check: its output holds the gates, the devices and the
  # specs, which it also writes for the containers.
  timeout "$(left)" "$BIN/nvidia-dra-driver" -check -check-cdi-dir "$cdir" -nvidia-cdi-hook-path "$hook" -driver-root "$droot" \
    -state-dir "${STATE_DIR:-/run/nvidia-dra-driver}" -node-name "${NODE_NAME:-$(hostname)}" "$@" >"$cdir/check.txt" 2>"$cdir/check.log" \
    || echo "nvidia-dra-driver -check exit $? (log: $cdir/check.log)" >"$cdir/check.exit"
  {
    echo "== gates (what decides DynamicMIG and DynamicMIGWholeGPU here)"
    grep -E '^# (gates |  GPU |DynamicMIG |WARNING )' "$cdir/check.txt" || echo "(none: see $cdir/check.log)"
    [ -f "$cdir/check.exit" ] && cat "$cdir/check.exit"
    echo "== nvidia-smi"; (timeout "$(left)" nvidia-smi -L && timeout "$(left)" nvidia-smi mig -lgip && timeout "$(left)" nvidia-smi mig -lgipp) 2>&1 || true
    echo "== nvidia-dra-driver -check -driver-root $droot"
    cat "$cdir/check.txt"
    echo "== nvml-probe"; timeout "$(left)" "$BIN/nvml-probe" 2>&1 || echo "nvml-probe exit $?"
    echo "== TestRealBackendReadOnly"
    timeout "$(left)" "$BIN/nvml.test" -test.run '^TestRealBackendReadOnly$' -test.v -test.count=1 2>&1 || echo "test exit $?"
    lib=""
    for d in usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib64 usr/lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu lib64 lib usr/lib/x86_64-linux-gnu/nvidia/current; do
      if [ -e "${droot%/}/$d/libnvidia-ml.so.1" ]; then lib="${droot%/}/$d/libnvidia-ml.so.1"; break; fi
    done
    if [ -z "$lib" ]; then lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}'); fi
    echo "== readelf -d ${lib:-libnvidia-ml.so.1 (not found)}"
    if [ -n "$lib" ]; then readelf -d "$(readlink -f "$lib")" 2>&1 || echo "readelf exit $?"; fi
    echo "== containers from the driver's CDI specs (runc, cuda-probe)"
    t=$(left)
    timeout "$t" "$BIN/gpu-container" -image "$BIN/image.tar" -cdi-dir "$cdir" -probe "$BIN/cuda-probe" -runtime "${RUNC:-runc}" \
      -timeout "$(( t > 5 ? t - 5 : 1 ))s" 2>&1 || echo "gpu-container exit $?"
  } | tee "$out/gpu-check.txt"
  ;;
*)
  echo "usage: $0 [run] [nvidia-dra-driver -check flags] | build" >&2; exit 2 ;;
esac
