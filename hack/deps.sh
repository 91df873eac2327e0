#!/usr/bin/env bash
# Installs the Debian packages that banlieue's tests need, when they are missing and we
# run as root. The core suite needs none: Kubernetes itself is built from source by
# hack/envtest.sh. Provider suites add their packages (e.g. libvirt-daemon) here, and
# the clients banlieue did not write that witness its simulators: python3-proxmoxer
# drives the Proxmox VE simulator (requests is only its recommendation, so it is named).
set -euo pipefail

packages=(libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils dnsmasq-base ovmf iptables
	python3-proxmoxer python3-requests)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "deps: missing Debian packages ${missing[*]}; install them or run as root" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
