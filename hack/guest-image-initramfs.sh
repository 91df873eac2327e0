#!/usr/bin/env bash
# mmdebstrap's essential hook for hack/guest-image.sh, run before the kernel is installed:
# the initramfs holds only what mounts the root file system of banlieue's domains (a
# virtio disk, ext4), so the guest boots sooner. MODULES=dep would ask the build host's
# devices, which a chroot does not have.
set -euo pipefail
root=$1
mkdir -p "$root/etc/initramfs-tools/conf.d"
echo 'MODULES=list' >"$root/etc/initramfs-tools/conf.d/banlieue"
printf '%s\n' virtio_pci virtio_blk virtio_scsi ext4 >"$root/etc/initramfs-tools/modules"
