#!/usr/bin/env bash
# Installs the Debian packages that banlieue's tests need, when they are missing and we
# run as root. The core suite needs none: Kubernetes itself is built from source by
# hack/envtest.sh. Provider suites add their packages (e.g. libvirt-daemon) here, and
# the clients banlieue did not write that witness its simulators: python3-proxmoxer
# drives the Proxmox VE simulator (requests is only its recommendation, so it is named),
# and virsh (libvirt-clients) lists the domains libvirtd holds.
# The NoCloud seed's witnesses are xorriso, which reads the ISO back, and cloud-init's
# own code, which reads the seed and its network-config: the cloud-init package is
# unpacked in the cache below, never installed, as its boot services would reconfigure
# this host; python3-yaml and python3-configobj are the libraries that code imports.
set -euo pipefail

packages=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base ovmf iptables
	python3-proxmoxer python3-requests xorriso python3-yaml python3-configobj)
# cloud_init is where pkg/nocloud's tests look for the unpacked package (usr/lib/python3/…).
cloud_init=${XDG_CACHE_HOME:-$HOME/.cache}/banlieue/cloud-init
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "deps: missing Debian packages ${missing[*]}; install them or run as root" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if [[ ! -d $cloud_init/root/usr/lib/python3/dist-packages/cloudinit ]]; then
	# Downloaded into a scratch directory the unprivileged _apt user may write, then
	# unpacked; the .deb is not kept.
	scratch=$(mktemp -d)
	trap 'rm -rf "$scratch"' EXIT
	chmod 0755 "$scratch"
	chown _apt "$scratch" 2>/dev/null || true
	# A host whose packages were all there may never have fetched the package lists.
	(cd "$scratch" && { apt-get download -qq cloud-init 2>/dev/null || { apt-get update -qq && apt-get download -qq cloud-init; }; })
	mkdir -p "$cloud_init"
	rm -rf "$cloud_init/root.new"
	dpkg-deb -x "$scratch"/cloud-init_*.deb "$cloud_init/root.new"
	rm -rf "$cloud_init/root"
	mv "$cloud_init/root.new" "$cloud_init/root"
fi
