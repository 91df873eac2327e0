#!/usr/bin/env bash
# Builds one tool pinned in hack/tools/dev (controller-gen, golangci-lint) into a per-user
# cache outside the repository and prints the binary's path. A binary already built for
# these pins is reused.
set -euo pipefail

name=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools/dev"
# helm has a module of its own, hack/tools/helm: its dependencies stay apart from these.
[[ $name == helm ]] && tools="$here/tools/helm"
cache_root=${BANLIEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/banlieue}
key=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -c1-12)
out="$cache_root/tools/$key/$name"

mkdir -p "$cache_root/tools"
# One build at a time, so that parallel callers never write the same file.
exec 9>"$cache_root/tools/.lock"
flock 9

if [[ ! -x "$out" ]]; then
	case "$name" in
	controller-gen) pkg=sigs.k8s.io/controller-tools/cmd/controller-gen ;;
	# kube-api-linter's build of golangci-lint: the pinned golangci-lint with the
	# kubeapilinter module compiled in, as .golangci.yml enables it.
	golangci-lint) pkg=sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter ;;
	crd-ref-docs) pkg=github.com/elastic/crd-ref-docs ;;
	helm) pkg=helm.sh/helm/v4/cmd/helm ;;
	*) echo "tool.sh: unknown tool $name" >&2; exit 2 ;;
	esac
	echo "tool.sh: building $name" >&2
	mkdir -p "$(dirname "$out")"
	(cd "$tools" && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
fi
echo "$out"
