#!/bin/sh
# bench-removal.sh: the removal benchmark of docs/benchmarks.md, reproducible on any Linux
# machine as root. It prints the machine, the kernel and the tools, then
# runs BenchmarkRemoveInterleaved (mountdetect/bench_interleaved_linux_test.go):
# nodevol (library with one and two workers, in a child process, and the
# CLI), rm -rf, os.RemoveAll, the raw unlink floor (and its Go-syscall and
# io_uring variants), interleaved round by round, on tmpfs, ext4 and
# XFS, flat and nested, 10,000 and 100,000 files. Then the peak memory of
# `nodevol rm` and `rm -rf` on one flat directory of BIG files.
#
#   sudo hack/bench-removal.sh                 # about 15 minutes on 2 cores
#   sudo ROUNDS=3 MAX=1000000 REMOVERS=nodevol,nodevol-cli,rm-rf,floor hack/bench-removal.sh
#
# ROUNDS: rounds per shape (default 5; the medians are reported).
# MAX=1000000 adds the million-file shapes (an hour or more).
# REMOVERS: a comma-separated subset of the removers.
# BIG: files in the memory comparison (default 1000000; 0 skips it).
# Run it on an otherwise idle machine: the removers are compared by wall time.
set -eu
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench-removal.sh: run as root (loop mounts for ext4 and XFS)" >&2
	exit 1
fi
if ! command -v mkfs.xfs >/dev/null; then
	apt-get install -y -q xfsprogs >/dev/null
fi

echo "== machine"
uname -srm
nproc
grep -m1 'model name' /proc/cpuinfo || true
free -h | sed -n 2p
go version
rm --version | sed -n 1p
mkfs.xfs -V
mke2fs -V 2>&1 | sed -n 1p
git log -1 --format='nodevol %h %s' 2>/dev/null || true
uptime

echo "== interleaved removal (medians, ms per tree)"
NODEVOL_BENCH_MAX="${MAX:-}" NODEVOL_BENCH_REMOVERS="${REMOVERS:-}" \
	go test -run '^$' -bench 'RemoveInterleaved' -benchtime "${ROUNDS:-5}x" -timeout 6h ./mountdetect

big="${BIG:-1000000}"
[ "$big" = 0 ] && exit 0
echo "== peak memory removing one flat directory of $big files on tmpfs"
tmp=$(mktemp -d)
trap 'umount "$tmp/fs" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/nodevol" ./cmd/nodevol
mkdir "$tmp/fs"
unshare -m --propagation private sh -eu -c '
	mount -t tmpfs -o size=8g bench "$1/fs"
	for tool in nodevol rm; do
		mkdir "$1/fs/$tool"
		(cd "$1/fs/$tool" && seq -f "file-%.0f" 1 "$2" | xargs touch)
		if [ "$tool" = nodevol ]; then
			set -- "$1" "$2" "$1/nodevol" rm --allow-foreign-mount-namespace "$1/fs/$tool"
		else
			set -- "$1" "$2" rm -rf "$1/fs/$tool"
		fi
		root=$1 n=$2
		shift 2
		/usr/bin/time -f "$tool: %e s, peak RSS %M KiB" "$@"
		set -- "$root" "$n"
	done
' sh "$tmp" "$big"
