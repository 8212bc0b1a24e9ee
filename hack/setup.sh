#!/usr/bin/env bash
# setup.sh installs everything drakit's local cluster needs into
# ~/.cache/drakit ($DRAKIT_CACHE), idempotently: it runs "drakit setup",
# which a module that requires drakit runs as
#   go run github.com/drakit/drakit/cmd/drakit setup
# (the script and the pinned versions are in cmd/drakit/setup/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./cmd/drakit setup "$@"
