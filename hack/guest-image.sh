#!/usr/bin/env bash
# Builds banlieue's guest image: a small Debian system that boots under libvirt, with BIOS
# or UEFI (not Secure Boot: its GRUB is unsigned), with cloud-init (NoCloud only), the QEMU guest agent, systemd and a kernel, from
# Debian's packages, into a per-user cache outside the repository, and prints the
# image's path (a qcow2) as the last line. A cached image for the same inputs is reused.
#
# Nothing is mounted and nothing is downloaded but packages: mmdebstrap installs the
# system into a folder, using this machine's own apt sources (so no mirror is named
# here); mkfs.ext4 -d writes that folder into the disk file's root partition; GRUB's
# BIOS boot sector and core image (grub-mkimage, with its modules built in) are written
# before the first partition, where grub-install would put them, and GRUB's UEFI image
# goes onto an EFI system partition made with mkfs.vfat and mtools; qemu-img makes the
# qcow2.
# docs/providers/libvirt.md ("Images") says what the image holds and how to use it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${BANLIEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/banlieue}
suite=bookworm
# What the guest needs to prove banlieue's promises from inside: cloud-init applies user
# data and network-config (ifupdown renders it) and runs every stage without an error
# (its locale module needs update-locale, from locales), the agent answers the host,
# systemd-logind turns ACPI's power button into a clean shutdown.
packages=(systemd-sysv udev dbus linux-image-amd64 initramfs-tools cloud-init qemu-guest-agent
	ifupdown isc-dhcp-client iproute2 procps locales)
host_tools=(mmdebstrap grub-pc-bin grub-efi-amd64-bin e2fsprogs dosfstools mtools fdisk qemu-utils)

# The folder name is a digest of this script and its hooks (packages, steps) and of the
# sources it installs from, so a change to any of them builds afresh.
sources=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
existing=()
for s in "${sources[@]}"; do [[ -s $s ]] && existing+=("$s"); done
((${#existing[@]} > 0)) || { echo "guest-image: this machine has no apt sources to install from" >&2; exit 1; }
key=$(cat "$here"/guest-image*.sh "${existing[@]}" | sha256sum | cut -c1-12)
out="$cache_root/guest-image/$key"
image="$out/debian-$suite-guest.qcow2"

# --cached prints the image's path only when it is built, and fails otherwise: make dev
# uses the image when it exists and never waits for a build.
if [[ ${1:-} == --cached ]]; then
	[[ -s $image ]] && echo "$image"
	exit $?
fi

mkdir -p "$cache_root/guest-image"
exec 9>"$cache_root/guest-image/.lock"
flock 9
if [[ -s $image ]]; then
	echo "$image"
	exit 0
fi

missing=()
for p in "${host_tools[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "guest-image: missing Debian packages ${missing[*]}; install them or run as root" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# mmdebstrap's root mode needs root (chroot and mounts inside its own namespace).
[[ $(id -u) -eq 0 ]] || { echo "guest-image: building the image needs root" >&2; exit 1; }

start=$(date +%s)
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "guest-image: building a Debian $suite guest into $out (a few minutes the first time)" >&2

# The host's settings that let apt reach its sources (an old snapshot's dates, a proxy).
aptopts=()
while IFS= read -r line; do aptopts+=(--aptopt="$line;"); done < <(
	apt-config dump | grep -E '^Acquire::(https?::Proxy|Check-Valid-Until|Check-Date) ' || true)

root="$tmp/root"
mmdebstrap --mode=root --variant=minbase --skip=check/empty \
	--include="$(IFS=,; echo "${packages[*]}")" \
	"${aptopts[@]}" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--essential-hook="$here/guest-image-initramfs.sh \"\$1\"" \
	--customize-hook="$here/guest-image-customize.sh \"\$1\"" \
	"$suite" "$root" "${existing[@]}" >&2

# MBR partitions: an EFI system partition of 32 MiB from 1 MiB, then the root file
# system labelled "root"; the first MiB holds GRUB's BIOS boot sector and core image.
# The file is sparse: qemu-img keeps only data. Both GRUBs find the root file system
# by its label and read its /boot/grub/grub.cfg.
disk="$tmp/disk.raw"
esp_mib=32
size_mib=$((($(du -sm "$root" | cut -f1) * 3 / 2 + 512)))
truncate -s "$((1 + esp_mib + size_mib))M" "$disk"
printf 'start=2048, size=%dMiB, type=ef\nstart=%d, type=83, bootable\n' "$esp_mib" $(((1 + esp_mib) * 2048)) | sfdisk -q "$disk"
mkfs.ext4 -q -L root -d "$root" -E offset=$(((1 + esp_mib) * 1048576)) "$disk" "${size_mib}M"
cat >"$tmp/early.cfg" <<'CFG'
search --no-floppy --label --set=root root
set prefix=($root)/boot/grub
configfile $prefix/grub.cfg
CFG
modules=(part_msdos ext2 fat normal linux boot configfile echo test search search_label)
grub=/usr/lib/grub/i386-pc
grub-mkimage -O i386-pc -d "$grub" -o "$tmp/core.img" -c "$tmp/early.cfg" -p /boot/grub biosdisk "${modules[@]}"
((($(stat -c %s "$tmp/core.img") + 511) / 512 < 2047)) || { echo "guest-image: GRUB's core image does not fit before the partition" >&2; exit 1; }
# boot.img's code, not its partition table; it loads core.img from sector 1, whose
# block list grub-mkimage has already sized.
dd if="$grub/boot.img" of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$tmp/core.img" of="$disk" bs=512 seek=1 conv=notrunc status=none
grub-mkimage -O x86_64-efi -d /usr/lib/grub/x86_64-efi -o "$tmp/BOOTX64.EFI" -c "$tmp/early.cfg" -p /boot/grub "${modules[@]}"
mkfs.vfat -C -n ESP "$tmp/esp.img" $((esp_mib * 1024)) >/dev/null
mmd -i "$tmp/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$tmp/esp.img" "$tmp/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
dd if="$tmp/esp.img" of="$disk" bs=1M seek=1 conv=notrunc status=none
qemu-img convert -q -f raw -O qcow2 "$disk" "$tmp/image.qcow2"

mkdir -p "$out.new"
mv "$tmp/image.qcow2" "$out.new/$(basename "$image")"
{
	echo "suite: $suite"
	echo "packages: ${packages[*]}"
	echo "built: $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
	echo "size: $(stat -c %s "$out.new/$(basename "$image")") bytes (qcow2), $((1 + esp_mib + size_mib)) MiB virtual"
	echo "versions:"
	chroot "$root" dpkg-query -W -f='  ${Package} ${Version}\n' "${packages[@]}"
} >"$out.new/BUILD"
rm -rf "$out"
mv "$out.new" "$out"
cat "$out/BUILD" >&2
echo "$image"
