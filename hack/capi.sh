#!/usr/bin/env bash
# Builds Cluster API's core manager and clusterctl from source, as pinned in
# hack/tools/capi, into a per-user cache outside the repository, with Cluster API's CRDs
# and its core kustomize config copied beside them, and prints that folder as the last
# line. A folder that already holds everything for these pins is reused as it is.
#
# The folder holds:
#   manager      sigs.k8s.io/cluster-api/core, the core provider's manager
#   clusterctl   sigs.k8s.io/cluster-api/cmd/clusterctl
#   crd/         core/config/crd/bases: the CRDs test/capi installs into envtest
#   config/core, config/bootstrap-kubeadm, config/control-plane-kubeadm
#                the kustomize configs of the release's core-components.yaml,
#                bootstrap-components.yaml and control-plane-components.yaml, which
#                clusterctl init installs by default (test/capi renders them)
#   metadata.yaml  Cluster API's own clusterctl metadata (release series and contracts)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools/capi"
cache_root=${BANLIEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/banlieue}
capi_version=$(awk '$1 == "sigs.k8s.io/cluster-api" && $2 ~ /^v/ { print $2; exit }' "$tools/go.mod")
[[ $capi_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "capi: no sigs.k8s.io/cluster-api release in $tools/go.mod" >&2; exit 1; }
# The binaries report the release they are built from, as Cluster API's own build stamps
# it (hack/scripts/release/version.sh): clusterctl compares its version with the
# providers' metadata, and a v0.0.0 would match no release series.
pkg=sigs.k8s.io/cluster-api/version
ldflags="-X $pkg.gitVersion=$capi_version -X $pkg.gitMajor=${BASH_REMATCH[1]} -X $pkg.gitMinor=${BASH_REMATCH[2]} -X $pkg.gitTreeState=clean"
# The folder name carries a digest of the pins and of the stamp, so a change to either
# builds afresh.
key=$(cat "$tools/go.mod" "$tools/go.sum" <(echo "$ldflags") | sha256sum | cut -c1-12)
out="$cache_root/capi/$key"

mkdir -p "$cache_root/capi"
# One build at a time: a second caller (another make, a parallel test) waits for the
# first and then finds the binaries.
exec 9>"$cache_root/capi/.lock"
flock 9

if [[ -x "$out/manager" && -x "$out/clusterctl" && -d "$out/crd" && -d "$out/config/core" && -d "$out/config/bootstrap-kubeadm" && -d "$out/config/control-plane-kubeadm" && -f "$out/metadata.yaml" ]]; then
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "capi: building Cluster API $capi_version's manager and clusterctl into $out (about five minutes on 2 cores with a cold Go build cache)" >&2
export GOFLAGS=-mod=mod
(cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$tmp/manager" sigs.k8s.io/cluster-api/core)
(cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$tmp/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl)
# The module's own files, for this exact version: the CRDs the manager serves, and the
# kustomize configs of its release's components.
src=$(cd "$tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
cp -r "$src/core/config/crd/bases" "$tmp/crd"
mkdir "$tmp/config"
cp -r "$src/core/config" "$tmp/config/core"
cp -r "$src/bootstrap/kubeadm/config" "$tmp/config/bootstrap-kubeadm"
cp -r "$src/controlplane/kubeadm/config" "$tmp/config/control-plane-kubeadm"
cp "$src/metadata.yaml" "$tmp/metadata.yaml"
# The module cache is read-only; the copies are the cache's own.
chmod -R u+w "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
