#!/usr/bin/env bash
# mmdebstrap's customize hook for hack/guest-image.sh: configures the installed system in
# the folder $1 (from outside it) so that it boots from the disk guest-image.sh makes
# and takes everything else from its NoCloud seed.
set -euo pipefail
root=$1

echo 'LABEL=root / ext4 defaults,errors=remount-ro 0 1' >"$root/etc/fstab"
# GRUB's core image (built with its modules, so the folder needs no others) reads this.
# The kernel speaks on the serial console, the only console banlieue's domains have.
mkdir -p "$root/boot/grub"
cat >"$root/boot/grub/grub.cfg" <<'CFG'
set timeout=0
linux /vmlinuz root=LABEL=root ro console=ttyS0,115200n8
initrd /initrd.img
boot
CFG

# cloud-init reads only the NoCloud seed: no network probe for other datasources.
cat >"$root/etc/cloud/cloud.cfg.d/90-banlieue.cfg" <<'CFG'
datasource_list: [NoCloud, None]
CFG

# cloud-init's locale module gives the guest en_US.UTF-8 with update-locale, which
# refuses a locale that is not generated: it is generated here, once, and set, as on a
# distribution's cloud image.
echo 'en_US.UTF-8 UTF-8' >"$root/etc/locale.gen"
chroot "$root" locale-gen >/dev/null
echo 'LANG=en_US.UTF-8' >"$root/etc/default/locale"

# CPUs and memory banlieue plugs into the running guest (a Provider's hotplug: cpu,memory)
# come online at once: the kernel adds them offline on x86, and Debian ships no rule for
# that (Ubuntu's 40-vm-hotadd.rules and RHEL's 40-redhat.rules do the same).
cat >"$root/etc/udev/rules.d/40-banlieue-hotadd.rules" <<'RULES'
SUBSYSTEM=="cpu", ACTION=="add", TEST=="online", ATTR{online}=="0", ATTR{online}="1"
SUBSYSTEM=="memory", ACTION=="add", TEST=="state", ATTR{state}=="offline", ATTR{state}="online"
RULES

# ifupdown brings up what cloud-init renders into interfaces.d.
cat >"$root/etc/network/interfaces" <<'CFG'
auto lo
iface lo inet loopback
source /etc/network/interfaces.d/*
CFG
mkdir -p "$root/etc/network/interfaces.d"

# Each guest makes its own identity at first boot; the journal is kept across boots, so
# a guest's previous shutdown can be read back (journalctl -b -1).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root/etc/hostname"
mkdir -p "$root/var/log/journal"
# Nothing runs at boot that a test guest does not need.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
	rm -f "$root/etc/systemd/system/timers.target.wants/$unit"
done
rm -rf "$root/var/lib/apt/lists"/* "$root/var/cache/apt"/*.bin
