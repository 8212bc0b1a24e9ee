#!/usr/bin/env bash
# setup.sh installs everything drakit's local cluster needs, idempotently:
#   1. Debian packages the node needs (runc, CNI plugins, busybox-static, ...)
#   2. etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
#      kubelet and kubectl, built from the Go module proxy with the tools
#      module (tools.mod; never a dependency of the library)
#   3. containerd, ctr and the runc shim, from the Go module proxy
#   4. the pause and busybox images as docker-archive tarballs
#   5. Helm v4 (helm.sh/helm/v4), from the Go module proxy with Helm's own
#      go.mod and go.sum (go install PKG@VERSION), for the chart tests and
#      the demo
# "drakit setup" runs it (embedded in the drakit command) with the tools
# module written to $TOOLS and the folders set from package cluster, so the
# versions and the cache layout have one source. A second run only checks
# that it is all there. Progress goes to stderr.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:?set by drakit setup}
BIN=${BIN:?set by drakit setup}
IMAGES=${IMAGES:?set by drakit setup}
TOOLS=${TOOLS:?set by drakit setup}
HELM_VERSION=${HELM_VERSION:?set by drakit setup}
CONTAINERD_VERSION=v2.4.2
APT_PACKAGES=(runc containernetworking-plugins busybox-static iptables conntrack socat openssl)

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

need_cmd() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is required but not found; $2"
}

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "apt packages present"; return; fi
  if [ "$(id -u)" != 0 ]; then
    die "missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}"
  fi
  need_cmd apt-get "this script installs Debian packages with apt-get"
  say "installing Debian packages: ${missing[*]}"
  # A fresh machine needs the package lists once.
  if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/drakit-apt.log 2>&1; then
    apt-get update >>/tmp/drakit-apt.log 2>&1 || die "apt-get update failed; see /tmp/drakit-apt.log"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/drakit-apt.log 2>&1 \
      || die "apt-get install ${missing[*]} failed; see /tmp/drakit-apt.log"
  fi
}

build_k8s() {
  local minor; minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  local cmds=(etcd kubectl kubelet kube-scheduler kube-controller-manager kube-apiserver)
  local i=0 n=${#cmds[@]}
  mkdir -p "$BIN"
  for c in "${cmds[@]}"; do
    i=$((i+1))
    if [ -x "$BIN/$c" ]; then say "[$i/$n] $c: cached"; continue; fi
    local pkg=k8s.io/kubernetes/cmd/$c
    [ "$c" = etcd ] && pkg=go.etcd.io/etcd/server/v3
    say "[$i/$n] building $c (cold builds take minutes; kube-apiserver ~5 min on 2 cores)"
    local t0=$SECONDS
    (cd "$TOOLS" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "$pkg") \
      || die "building $c failed"
    mv "$BIN/$c.tmp" "$BIN/$c"
    say "[$i/$n] $c built in $((SECONDS-t0)) s"
  done
}

build_containerd() {
  local cmds=(containerd ctr containerd-shim-runc-v2)
  mkdir -p "$BIN"
  for c in "${cmds[@]}"; do
    if [ -x "$BIN/$c" ]; then say "$c: cached"; continue; fi
    say "building $c $CONTAINERD_VERSION"
    local t0=$SECONDS tmp
    tmp=$(mktemp -d)
    local cgo=1
    [ "$c" = containerd-shim-runc-v2 ] && cgo=0
    CGO_ENABLED=$cgo GOBIN=$tmp go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION" || die "building $c failed"
    mv "$tmp/$c" "$BIN/$c"; rm -rf "$tmp"
    say "$c built in $((SECONDS-t0)) s"
  done
}

# docker_archive NAME:TAG ROOTFS_DIR OUT CMD... writes a one-layer
# docker-archive tarball that `ctr images import` accepts.
docker_archive() {
  local ref=$1 rootfs=$2 out=$3; shift 3
  local work; work=$(mktemp -d)
  tar -C "$rootfs" --numeric-owner --owner=0 --group=0 --mtime='@0' --sort=name -cf "$work/layer.tar" .
  local diffid; diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  mkdir -p "$work/$diffid"; mv "$work/layer.tar" "$work/$diffid/layer.tar"
  local cmdjson; cmdjson=$(printf '"%s",' "$@"); cmdjson="[${cmdjson%,}]"
  printf '{"architecture":"amd64","os":"linux","config":{"Cmd":%s,"Env":["PATH=/bin:/usr/bin:/sbin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"drakit setup"}]}' \
    "$cmdjson" "$diffid" >"$work/config.json"
  local cfgid; cfgid=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$cfgid.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfgid" "$ref" "$diffid" >"$work/manifest.json"
  tar -C "$work" -cf "$out.tmp" manifest.json "$cfgid.json" "$diffid"
  mv "$out.tmp" "$out"; rm -rf "$work"
}

build_images() {
  mkdir -p "$IMAGES"
  if [ ! -f "$IMAGES/pause.tar" ]; then
    need_cmd gcc "install it with: apt-get install -y gcc libc6-dev"
    local src
    src=$(cd "$TOOLS" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)
    [ -f "$src/build/pause/linux/pause.c" ] || (cd "$TOOLS" && go mod download k8s.io/kubernetes)
    local r; r=$(mktemp -d)
    gcc -Os -static -DVERSION=3.10-drakit -o "$r/pause" "$src/build/pause/linux/pause.c" \
      || die "compiling pause failed (needs gcc and the static libc: apt-get install -y libc6-dev)"
    docker_archive registry.k8s.io/pause:3.10 "$r" "$IMAGES/pause.tar" /pause
    rm -rf "$r"; say "pause image built"
  fi
  if [ ! -f "$IMAGES/busybox.tar" ]; then
    [ -x /bin/busybox ] || die "/bin/busybox missing: apt-get install -y busybox-static"
    local r; r=$(mktemp -d)
    mkdir -p "$r/bin" "$r/tmp" "$r/etc"
    cp /bin/busybox "$r/bin/busybox"
    for a in sh env cat ls sleep echo true false test grep; do ln -s busybox "$r/bin/$a"; done
    docker_archive drakit.local/busybox:latest "$r" "$IMAGES/busybox.tar" /bin/sh
    rm -rf "$r"; say "busybox image built"
  fi
}

build_helm() {
  if [ -x "$BIN/helm" ]; then say "helm: cached"; return; fi
  say "building helm $HELM_VERSION (about 3 min cold on 2 cores)"
  local t0=$SECONDS tmp
  tmp=$(mktemp -d)
  # Its own module graph (Helm's go.mod and go.sum, checked against the
  # checksum database), whatever GOFLAGS the caller has set.
  (cd "$tmp" && CGO_ENABLED=0 GOFLAGS= GOWORK=off GOBIN=$tmp go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION") || die "building helm failed"
  mv "$tmp/helm" "$BIN/helm"; rm -rf "$tmp"
  say "helm built in $((SECONDS-t0)) s"
}

main() {
  need_cmd go "install Go 1.26 from the Go module proxy's toolchain or your distribution"
  local t0=$SECONDS
  install_apt
  build_k8s
  build_containerd
  build_images
  build_helm
  say "ready in $((SECONDS-t0)) s: binaries in $BIN, images in $IMAGES"
}

main "$@"
