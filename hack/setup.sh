#!/usr/bin/env bash
# setup.sh installs everything drakit's local cluster needs into
# ~/.cache/drakit ($DRAKIT_CACHE), idempotently: it runs "drakit setup",
# which a module that requires drakit runs as
#   go run github.com/drakit/drakit/cmd/drakit setup
# (the script and the pinned versions are in cmd/drakit/setup/).
set -euo pipefail
# go-nvml's cgo code calls NVML functions its header marks deprecated:
# without this, the first build prints ~140 lines of compiler warnings.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./cmd/drakit setup "$@"
