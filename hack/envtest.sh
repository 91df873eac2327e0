#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from source, as pinned in hack/tools/envtest,
# into a per-user cache outside the repository, and prints that folder as the last line.
# A folder that already holds all three binaries for these pins is reused as it is.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools/envtest"
cache_root=${BANLIEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/banlieue}
# The binaries report the release they are built from, as Kubernetes' own build stamps
# it: a client such as Cluster API refuses a server that says v0.0.0-master.
k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$tools/go.mod")
[[ $k8s_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "envtest: no k8s.io/kubernetes release in $tools/go.mod" >&2; exit 1; }
pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=${BASH_REMATCH[1]} -X $pkg.gitMinor=${BASH_REMATCH[2]} -X $pkg.gitTreeState=clean"
# The folder name carries a digest of the pins and of the stamp, so a change to either
# builds afresh.
key=$(cat "$tools/go.mod" "$tools/go.sum" "$tools/etcd/go.mod" "$tools/etcd/go.sum" <(echo "$ldflags") | sha256sum | cut -c1-12)
out="$cache_root/envtest/$key"

mkdir -p "$cache_root/envtest"
# One build at a time: a second caller (another make, a parallel test) waits for the
# first and then finds the binaries.
exec 9>"$cache_root/envtest/.lock"
flock 9

if [[ -x "$out/kube-apiserver" && -x "$out/kubectl" && -x "$out/etcd" ]]; then
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "envtest: building etcd, kube-apiserver and kubectl into $out (about ten minutes on 2 cores the first time)" >&2
export CGO_ENABLED=0 GOFLAGS=-mod=mod
(cd "$tools/etcd" && go build -trimpath -o "$tmp/etcd" .)
(cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
(cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl)
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
