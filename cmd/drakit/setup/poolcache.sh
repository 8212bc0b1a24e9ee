#!/usr/bin/env bash
# poolcache.sh builds kube-scheduler-poolcache: kube-scheduler of the
# tools module with k8s.io/dynamic-resource-allocation replaced by a copy
# patched with poolcache.patch (GatherPools keeps the pools it converted
# and validated, per set of slice objects). Only "drakit setup
# -scheduler-pool-cache" runs it, for "drakit bench sched -pool-cache"; the
# default setup never does. The patched copy lives in the cache ($SRC),
# never in the repository: the patch is all drakit carries of upstream's
# code. Progress goes to stderr.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:?set by drakit setup}
BIN=${BIN:?set by drakit setup}
TOOLS=${TOOLS:?set by drakit setup}
SRC=${SRC:?set by drakit setup}
PATCH=${PATCH:?set by drakit setup}
MOD=k8s.io/dynamic-resource-allocation
OUT=kube-scheduler-poolcache

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is required"
command -v patch >/dev/null 2>&1 || die "patch is required (apt-get install -y patch)"

stamp=$(sha256sum "$PATCH" | cut -c1-16)
if [ -x "$BIN/$OUT" ] && [ "$(cat "$BIN/$OUT.patch" 2>/dev/null)" = "$stamp" ]; then
  say "$OUT: cached"; exit 0
fi

cd "$TOOLS"
export GOFLAGS=-mod=mod
ver=$(go list -m -f '{{.Version}}' "$MOD") || die "the tools module does not require $MOD"
go mod download "$MOD@$ver" || die "downloading $MOD@$ver failed"
orig=$(go list -m -f '{{.Dir}}' "$MOD")
[ -d "$orig" ] || die "$MOD@$ver is not in the module cache"

dest="$SRC/dynamic-resource-allocation-$ver-poolcache-$stamp"
if [ ! -f "$dest/.patched" ]; then
  say "patching a copy of $MOD@$ver into $dest"
  rm -rf "$dest"; mkdir -p "$SRC"
  cp -r "$orig" "$dest.tmp"; chmod -R u+w "$dest.tmp"
  patch -s -p1 -d "$dest.tmp" <"$PATCH" || die "poolcache.patch does not apply to $MOD@$ver"
  touch "$dest.tmp/.patched"; mv "$dest.tmp" "$dest"
fi
go mod edit -replace "$MOD=$dest"

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=dirty"
say "building $OUT (kube-scheduler $K8S_VERSION with poolcache.patch; minutes on 2 cores)"
t0=$SECONDS
mkdir -p "$BIN"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/$OUT.tmp" k8s.io/kubernetes/cmd/kube-scheduler || die "building $OUT failed"
mv "$BIN/$OUT.tmp" "$BIN/$OUT"
echo "$stamp" >"$BIN/$OUT.patch"
say "$OUT built in $((SECONDS-t0)) s: $BIN/$OUT"
