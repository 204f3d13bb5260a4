#!/usr/bin/env bash
# Real project-quota tests for fsquota, in a VM.
#
# The CI host's kernel has no quota support, so this boots a stock Debian
# cloud kernel under QEMU (TCG) with a busybox initramfs and two sparse disk
# images, XFS (/dev/vda) and ext4 with the project and quota features
# (/dev/vdb), both mounted with -o prjquota. In that one boot it runs, once
# per filesystem, fsquota's TestVM* tests (project IDs, assign, usage,
# enforcement, clear, restart adoption, ID release) and emptydir's crash
# tests for the Default medium (TestCrash/Default: a child SIGKILLed at
# each step of SetUp and TearDown, a new volume manager after it, no
# project leaked in the files or the kernel) and its quota path-swap race
# (no directory outside the volume changes its project, flags or limit)
# with the kernel's own quotas,
# and nodevol-csi's TestVMSizeLimitEnforced (a Default inline volume's
# sizeLimit stops a pod's writer), and reads the result lines
# from the serial console. The kernel package
# is only downloaded and unpacked into a work directory; nothing is
# installed as the host's kernel.
#
# Usage: hack/quota-vm-test.sh            (as root on Debian/Ubuntu amd64)
# Env:   NODEVOL_VM_CACHE   where the kernel .deb is kept between runs
#                           (default ~/.cache/nodevol-quota-vm)
#        NODEVOL_VM_TIMEOUT seconds before the VM is killed (default 600)
#        NODEVOL_VM_KEEP=1  keep the work directory for inspection
# Exit:  0 when the tests passed in the VM, non-zero otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
t0=$EPOCHREALTIME
since() { awk -v now="$EPOCHREALTIME" -v then="$1" 'BEGIN { printf "%.1f", now - then }'; }
say() { echo "[quota-vm $(since "$t0")s] $*"; }
die() { echo "quota-vm: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || die "needs an x86_64 host (uses qemu-system-x86_64 and an amd64 kernel)"
[ "$(id -u)" = 0 ] || die "needs root (apt-get install, mkfs.xfs on an image)"

# Host tools. A kernel is NOT among them: it is downloaded, not installed.
pkgs=(qemu-system-x86 busybox-static cpio kmod xfsprogs e2fsprogs)
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
# (grep without -q: under pipefail, grep -q exiting at the first match
# fails the pipeline when busybox then dies of SIGPIPE, and the check would
# reinstall busybox-static on every run.)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -x insmod >/dev/null || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
command -v depmod >/dev/null || missing+=(kmod)
command -v mkfs.xfs >/dev/null || missing+=(xfsprogs)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[quota-vm] installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
    die "could not install ${pkgs[*]}"
fi
say "host tools ready"

work=$(mktemp -d /tmp/nodevol-quota-vm.XXXXXX)
if [ "${NODEVOL_VM_KEEP:-}" = 1 ]; then echo "[quota-vm] work directory: $work"; else trap 'rm -rf "$work"' EXIT; fi
cache=${NODEVOL_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodevol-quota-vm}
mkdir -p "$cache"

# The kernel: the package linux-image-cloud-amd64 depends on, unpacked.
kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$kpkg" ]; then
  apt-get update -qq
  kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$kpkg" ] || die "cannot find the package behind linux-image-cloud-amd64"
kver=${kpkg#linux-image-}
deb=$(ls "$cache/${kpkg}_"*.deb 2>/dev/null | head -n1 || true)
if [ -z "$deb" ]; then
  (cd "$cache" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >/dev/null) || die "apt-get download $kpkg failed"
  deb=$(ls "$cache/${kpkg}_"*.deb | head -n1)
fi
dpkg-deb -x "$deb" "$work/kernel"
depmod -b "$work/kernel" "$kver" # the .deb ships no modules.dep
say "kernel $kver unpacked"

# The initramfs: busybox as /init, the modules xfs, ext4 and virtio need (in
# load order), the static test binary. The cloud kernel builds ext4 in
# (modprobe --show-depends prints "builtin ext4", which the awk drops), but
# not the quota file format: ext4 keeps project quotas in hidden quota
# inodes in the QFMT_VFS_V1 format, and its mount asks for the module
# quota_v2 (with quota_tree) through request_module, which finds no modprobe
# in this initramfs. So it is loaded up front.
root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,tmp,mnt,modules}
cp /bin/busybox "$root/bin/busybox"
n=0
: >"$root/modules/order"
for mod in xfs ext4 quota_v2 virtio_blk virtio_pci; do
  modprobe -d "$work/kernel" -S "$kver" --show-depends "$mod"
done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
  n=$((n + 1))
  name=$(printf '%02d-%s' "$n" "$(basename "${ko%.ko*}").ko")
  case "$ko" in
    *.ko.xz) xz -dc "$ko" >"$root/modules/$name" ;;
    *.ko.zst) zstd -qdc "$ko" >"$root/modules/$name" ;;
    *.ko.gz) gzip -dc "$ko" >"$root/modules/$name" ;;
    *) cp "$ko" "$root/modules/$name" ;;
  esac
  echo "$name" >>"$root/modules/order"
done
[ -s "$root/modules/order" ] || die "no modules resolved for xfs/virtio"
grep -q 'quota_v2' "$root/modules/order" ||
  modprobe -d "$work/kernel" -S "$kver" --show-depends quota_v2 | grep -q builtin ||
  die "no quota_v2 module (ext4's quota format) in $kpkg"

CGO_ENABLED=0 go test -c -o "$root/fsquota.test" ./fsquota
CGO_ENABLED=0 go test -c -o "$root/emptydir.test" ./emptydir
(cd csi && CGO_ENABLED=0 go test -c -o "$root/csi.test" ./driver)
say "test binaries built (fsquota $(du -h "$root/fsquota.test" | cut -f1), emptydir $(du -h "$root/emptydir.test" | cut -f1), csi $(du -h "$root/csi.test" | cut -f1))"

cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod "/modules/$m" 2>/dev/null || echo "insmod $m failed (fine for a CPU-specific module such as crc32c-intel under TCG)"; done
# run FS NAME BINARY PATTERN: run the tests of BINARY matching PATTERN on
# /mnt/FS with every output line prefixed "[FS] "; non-zero unless they
# passed.
run() {
  echo "[$1] == $2: go test -run '$4'"
  { (cd /tmp && NODEVOL_QUOTA_VM=/mnt/$1 NODEVOL_QUOTA_VM_FS=$1 TMPDIR=/tmp "$3" -test.run "$4" -test.v -test.count=1 -test.timeout=300s 2>&1); echo $? >/tmp/rc; } | sed "s/^/[$1] /"
  return "$(cat /tmp/rc)"
}
# suite FS DEV OPTS: mount DEV (fstype FS) on /mnt/FS with OPTS, run the
# TestVM* and TestCrash/Default tests there, print one result line for FS
# and return non-zero unless they passed.
suite() {
  fs=$1 dev=$2 opts=$3 mnt=/mnt/$1
  i=0
  while [ ! -b "$dev" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
  mkdir -p "$mnt"
  if [ ! -b "$dev" ]; then
    r="FAIL (no $dev)"
  elif ! mount -t "$fs" -o "$opts" "$dev" "$mnt"; then
    r="FAIL (mount -t $fs -o $opts $dev)"
  else
    echo "[$fs] == go test in the VM: $(uname -r), $dev on $mnt ($fs, -o $opts)"
    failed=
    run "$fs" fsquota /fsquota.test '^TestVM' || failed="$failed fsquota"
    run "$fs" emptydir /emptydir.test '^TestCrash$/^Default$/' || failed="$failed emptydir-crash"
    run "$fs" emptydir /emptydir.test '^TestQuotaPathSwap$' || failed="$failed emptydir-quota-swap"
    run "$fs" csi /csi.test '^TestVM' || failed="$failed csi"
    if [ -z "$failed" ]; then r=PASS; else r="FAIL (go test failed:$failed)"; fi
    umount "$mnt" || r="FAIL (umount $mnt)"
  fi
  echo "NODEVOL-QUOTA-VM-RESULT-$fs: $r"
  [ "$r" = PASS ]
}
result=PASS
suite xfs /dev/vda prjquota || result=FAIL
# noinit_itable: no background inode-table zeroing competing for the one
# emulated CPU.
suite ext4 /dev/vdb prjquota,noinit_itable || result=FAIL
echo "NODEVOL-QUOTA-VM-RESULT: $result"
sync
poweroff -f
EOF
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/initrd.img"

truncate -s 512M "$work/xfs.img" "$work/ext4.img"
mkfs.xfs -q -f "$work/xfs.img"
# ext4 project quotas need the project feature (a project ID in every
# inode) and the quota feature with a project quota inode (accounting is on
# from mount time; -o prjquota adds enforcement).
mkfs.ext4 -q -F -O quota,project -E quotatype=prjquota "$work/ext4.img"
say "initramfs ($(du -h "$work/initrd.img" | cut -f1)), 512M XFS and 512M ext4 images ready; booting"

# TCG, not KVM: the /dev/kvm of this project's machines is a software nested
# hypervisor that hangs stock kernels. The guest's exit code does not reach
# qemu, so the result is read from the serial console.
tb=$EPOCHREALTIME
set +e
timeout "${NODEVOL_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg -m 512M -smp 1 \
  -nographic -nodefaults -serial stdio -net none -no-reboot \
  -kernel "$work/kernel/boot/vmlinuz-$kver" -initrd "$work/initrd.img" \
  -append 'console=ttyS0 panic=-1 quiet' \
  -drive "file=$work/xfs.img,if=virtio,format=raw" \
  -drive "file=$work/ext4.img,if=virtio,format=raw" </dev/null | sed -u 's/\r//g; s/\x1bc//g; s/\x1b\[[0-9;?]*[A-Za-z]//g' | tee "$work/serial.log"
qrc=${PIPESTATUS[0]}
set -e
vm=$(since "$tb")
result=$(grep -a '^NODEVOL-QUOTA-VM-RESULT: ' "$work/serial.log" | tail -n1 | cut -d' ' -f2-)
say "VM ran ${vm}s (qemu exit $qrc); result: ${result:-none}"
# A failure's lines again at the end, where a log's tail shows them: each
# failed test with the lines it logged just before.
if [ "$result" != PASS ]; then
  echo "[quota-vm] what failed:"
  grep -a -B12 -E -- '--- FAIL|^\[[a-z0-9]+\] (FAIL|panic)' "$work/serial.log" | head -n 200 || true
fi
[ "$qrc" = 124 ] && die "the VM timed out"
for fs in xfs ext4; do
  r=$(grep -a "^NODEVOL-QUOTA-VM-RESULT-$fs: " "$work/serial.log" | tail -n1 | cut -d' ' -f2-)
  [ "$r" = PASS ] || die "quota VM tests on $fs failed: ${r:-no result line on the serial console}"
  n=$(grep -ac -- "^\[$fs\] --- PASS: TestVM" "$work/serial.log" || true)
  [ "$n" -gt 0 ] || die "no TestVM test ran on $fs"
  c=$(grep -ac -- "^\[$fs\]     --- PASS: TestCrash/Default/" "$work/serial.log" || true)
  [ "$c" -gt 0 ] || die "no TestCrash/Default case ran on $fs"
  v=$(grep -ac -- "^\[$fs\] --- PASS: TestVMSizeLimitEnforced" "$work/serial.log" || true)
  [ "$v" -gt 0 ] || die "nodevol-csi's TestVMSizeLimitEnforced did not pass on $fs"
  say "ok: $n VM tests, $c crash cases and nodevol-csi's sizeLimit test passed on $fs"
done
[ "$result" = PASS ] || die "quota VM tests failed: ${result:-no result line on the serial console}"
if grep -aqE -- '--- SKIP: (TestVM|TestCrash)' "$work/serial.log"; then die "a TestVM or TestCrash test skipped inside the VM"; fi
