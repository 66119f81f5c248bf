#!/usr/bin/env bash
# Boots a kernel that has UHID (Debian's, which the build machine's may not be) in a small VM and
# runs SCRIPT there, in the host's own root file system (read-only over 9p, with /run and /dev of
# the VM's own), so the binaries under test and libfido2's tools are the host's.
#
#     run-in-vm.sh KERNEL_ROOT OUT SCRIPT
#
# KERNEL_ROOT is an unpacked linux-image package (boot/vmlinuz-*, lib/modules/*): .ci/install-dependencies
# unpacks Debian's into .build/uhid-vm/kernel. OUT is a directory the VM writes (mounted at
# /run/out inside): SCRIPT's output in inside.log, its exit status in status, and the VM's console
# in console.log. UHID_VM_ACCELERATION=kvm uses KVM; UHID_VM_TIMEOUT bounds the VM (600 s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kernel_root=$1 out=$2 script=$3
vmlinuz=$(ls "$kernel_root"/boot/vmlinuz-* | head -1)
version=${vmlinuz##*/vmlinuz-}
modules=$kernel_root/lib/modules/$version/kernel
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/initramfs/bin" "$work/initramfs/modules"
for directory in proc sys dev host; do mkdir -p "$work/initramfs/$directory"; done
cp /bin/busybox "$work/initramfs/bin/busybox"
cp "$here/init" "$work/initramfs/init"
# In dependency order: virtio's PCI transport, 9p over it, then HID, its generic driver and UHID.
order="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci 9pnet 9pnet_virtio netfs fscache 9p hid hid-generic uhid"
for module in $order; do
    file=$(find "$modules" -name "$module.ko" | head -1)
    [ -n "$file" ] || { echo "run-in-vm.sh: $module.ko is not in $modules" >&2; exit 1; }
    cp "$file" "$work/initramfs/modules/"
done
echo "$order" > "$work/initramfs/modules/order"
(cd "$work/initramfs" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd"
# QEMU's emulation by default (the whole run takes about 20 s): it works where KVM is nested
# badly (on the machine this was written on, a KVM guest hangs before its first console line).
acceleration=(-accel tcg)
if [ "${UHID_VM_ACCELERATION:-tcg}" = kvm ]; then acceleration=(-enable-kvm); fi
rm -f "$out/status"
timeout "${UHID_VM_TIMEOUT:-600}" qemu-system-x86_64 "${acceleration[@]}" -m 1024 -smp 2 -nographic -no-reboot \
    -kernel "$vmlinuz" -initrd "$work/initrd" -append "console=ttyS0 earlyprintk=ttyS0 panic=-1 uhid_vm_script=$script" \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap,id=host \
    -virtfs local,path="$out",mount_tag=out,security_model=none,id=out \
    > "$out/console.log" 2>&1 </dev/null
[ -f "$out/status" ] || { echo "run-in-vm.sh: the VM ended without a status; see $out/console.log" >&2; exit 1; }
exit "$(cat "$out/status")"
