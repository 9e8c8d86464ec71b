#!/usr/bin/env bash
# testbin.sh builds the real Kubernetes control-plane binaries that Atoll's tests
# run against (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok)
# from the Go module proxy, and prints the folder that holds them.
#
# The folder lives in the user's cache directory, keyed by the tools module's go.sum
# and the kwok version, so a fresh clone on the same machine finds it again and the
# ~18-minute cold build happens once per machine. A finished folder is never rebuilt.
#
# Usage: hack/testbin.sh            # build when missing, print the folder
#        ATOLL_TESTBIN_DIR=...      # use this folder as the cache root instead
set -euo pipefail

KUBE_VERSION=v1.37.2
KWOK_VERSION=v0.8.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/testbin"
cache_root=${ATOLL_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atoll/testbin}
key=$( (cat "$mod/go.mod" "$mod/go.sum"; echo "kwok=$KWOK_VERSION recipe=2") | sha256sum | cut -c1-16)
dest="$cache_root/$key"

if [ -f "$dest/.complete" ]; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ -f "$dest/.complete" ]; then
  echo "$dest"
  exit 0
fi

log() { echo "testbin: $*" >&2; }
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

log "building kube-apiserver, kube-controller-manager, kube-scheduler, etcd ($KUBE_VERSION) into $dest; a cold build takes about 15-20 minutes"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
(
  cd "$mod"
  CGO_ENABLED=0 go build -trimpath -o "$tmp/" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/etcd
) >&2

log "building kwok $KWOK_VERSION"
(cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-trimpath go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") >&2

kwokdir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  cat "$kwokdir/$f"
  echo "---"
done > "$tmp/kwok-stages.yaml"

"$tmp/kube-apiserver" --version >&2
touch "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "done in $(( $(date +%s) - start ))s"
echo "$dest"
