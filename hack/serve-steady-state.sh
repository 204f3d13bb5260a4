#!/usr/bin/env bash
# Measures `nodevol serve --interval 10s` in its steady state on a busy node:
# the scan benchmark's fixture (internal/testsupport/nodefixture: 1,000 pods, 10,000
# volume directories, 1,000 mounts) on tmpfs, in a private mount namespace
# of its own (nothing is mounted in, or leaks to, the caller's).
#
#   sudo hack/serve-steady-state.sh [SECONDS [PODS]]     # default 180 s, 1000 pods
#   sudo NODEVOL_BIN=/path/to/nodevol hack/serve-steady-state.sh ...   # another build (a baseline)
#   sudo NODEVOL_BIN=... NODEVOL_AGENT_BIN=/path/to/nodevol-agent hack/serve-steady-state.sh ...   # its agent (default: built here)
#   sudo NODEVOL_LATENCY=0 hack/serve-steady-state.sh ...   # without the latency runs
#
# After a warm-up of two intervals it samples /proc/PID/stat (utime+stime)
# and /proc/PID/status (VmRSS, VmHWM) every interval for SECONDS, then
# prints CPU (% of one core, CPU seconds per scan), memory, the scan
# duration from the agent's own /metrics (nodevol_scan_duration_seconds)
# and the Go heap from the runtime's GC trace (GODEBUG=gctrace=1: the
# metrics do not export Go's collectors). Then it measures the detection
# latency five times: a tmpfs "NAS" mounted into an emptyDir of a pod in
# the middle, and the time until /metrics says one more volume is in
# danger (polled every 10 ms), then unmounted, until it says one less.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${NODEVOL_STEADY_NS:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "needs root: it mounts 1,000 tmpfs (in a private mount namespace)" >&2; exit 2; }
  exec unshare --mount --propagation private env NODEVOL_STEADY_NS=1 "$0" "$@"
fi

seconds=${1:-180}
pods=${2:-1000}
interval=10
port=19477

work=$(mktemp -d /dev/shm/nodevol-steady.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  # Everything is on a tmpfs of its own, mounted in this namespace: one
  # lazy unmount detaches it and every mount beneath it (one umount per
  # mount took minutes at 4,000 mounts, each rereading the table).
  umount -l "$work" 2>/dev/null || true
  rmdir "$work"
}
trap cleanup EXIT
mount -t tmpfs nodevol-steady "$work"

if [ -n "${NODEVOL_BIN:-}" ]; then cp "$NODEVOL_BIN" "$work/nodevol"; else go build -o "$work/nodevol" ./cmd/nodevol; fi
# "nodevol serve" runs the agent beside nodevol.
if [ -n "${NODEVOL_AGENT_BIN:-}" ]; then cp "$NODEVOL_AGENT_BIN" "$work/nodevol-agent"; else go build -o "$work/nodevol-agent" ./cmd/nodevol-agent; fi
go build -o "$work/nodefixture" ./hack/nodefixture
"$work/nodefixture" -root "$work/kubelet" -pods "$pods"
echo "mount table: $(wc -l </proc/self/mountinfo) entries"

GODEBUG=gctrace=1 "$work/nodevol" serve --root "$work/kubelet" --interval "${interval}s" \
  --listen "127.0.0.1:$port" 2>"$work/serve.log" &
pid=$!

metrics() { curl -fsS "http://127.0.0.1:$port/metrics"; }
# The value of the first series of metric $1 (awk reads all: an early exit
# would fail curl with a broken pipe).
metric() { metrics | awk -v m="$1" '!found && $1 ~ "^"m"({|$)" {v = $2; found = 1} END {print v}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
status_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }

# Warm-up: the first scan (at start) and one interval.
for _ in $(seq 50); do metrics >/dev/null 2>&1 && break; sleep 0.2; done
sleep $((2 * interval))
hz=$(getconf CLK_TCK)
t0=$(date +%s.%N); c0=$(cpu_ticks); s0=$(metric nodevol_scans_total)
d0=$(metric nodevol_scan_duration_seconds_sum)
rss_max=0
echo "sampling for ${seconds}s (every ${interval}s): elapsed, CPU s, VmRSS kB, VmHWM kB, scans"
end=$(( $(date +%s) + seconds ))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep "$interval"
  kill -0 "$pid"
  rss=$(status_kb VmRSS)
  [ "$rss" -gt "$rss_max" ] && rss_max=$rss
  printf '  %6.1f s  %6.2f  %7d  %7d  %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" \
    "$(echo "($(cpu_ticks) - $c0) / $hz" | bc -l)" "$rss" "$(status_kb VmHWM)" "$(metric nodevol_scans_total)"
done
t1=$(date +%s.%N); c1=$(cpu_ticks); s1=$(metric nodevol_scans_total)
d1=$(metric nodevol_scan_duration_seconds_sum)

elapsed=$(echo "$t1 - $t0" | bc -l)
cpu=$(echo "($c1 - $c0) / $hz" | bc -l)
scans=$(echo "$s1 - $s0" | bc)
echo
echo "== nodevol serve --interval ${interval}s, $pods pods ($((pods * 10)) volume directories), $(nproc) CPUs, $(uname -r)"
printf 'window:           %.1f s, %d scans\n' "$elapsed" "$scans"
printf 'CPU:              %.2f s = %.2f %% of one core; %.3f CPU s per scan\n' "$cpu" "$(echo "100 * $cpu / $elapsed" | bc -l)" "$(echo "$cpu / $scans" | bc -l)"
printf 'scan duration:    %.3f s mean over the window (nodevol_scan_duration_seconds)\n' "$(echo "($d1 - $d0) / $scans" | bc -l)"
printf 'memory:           VmRSS %d kB now, %d kB max sampled; VmHWM %d kB\n' "$(status_kb VmRSS)" "$rss_max" "$(status_kb VmHWM)"
echo "Go heap (gctrace, last 3 GCs: heap at start -> end -> live MB, goal):"
grep '^gc ' "$work/serve.log" | tail -3 | sed -E 's/^.*: .* ([0-9]+->[0-9]+->[0-9]+ MB), ([0-9]+ MB goal).*$/  \1, \2/'
printf 'GCs in the log:   %d\n' "$(grep -c '^gc ' "$work/serve.log")"
printf 'danger volumes:   %s (expected %d)\n' "$(metric nodevol_scan_danger_volumes)" "$((pods / 100))"

# Detection latency: mount a NAS into a volume verified clean, and wait for
# the danger gauge to count it; unmount, and wait for it to drop.
# NODEVOL_LATENCY=0 skips it.
[ "${NODEVOL_LATENCY:-1}" = 1 ] || exit 0
uid=$(ls "$work/kubelet/pods" | sed -n "$((pods / 2 + 1))p")
nas="$work/kubelet/pods/$uid/volumes/kubernetes.io~empty-dir/cache/nas"
mkdir -p "$nas"
base=$(metric nodevol_scan_danger_volumes)
wait_danger() {
  local want=$1 t0 v
  t0=$(date +%s.%N)
  for _ in $(seq 3000); do
    v=$(metric nodevol_scan_danger_volumes)
    if [ "$v" = "$want" ]; then printf '%.3f' "$(echo "$(date +%s.%N) - $t0" | bc -l)"; return; fi
    sleep 0.01
  done
  echo "timeout"
}
echo "detection latency (NAS mounted -> danger $((base + 1)); unmounted -> $base), seconds:"
for i in 1 2 3 4 5; do
  sleep 3
  mount -t tmpfs -o size=64k nas "$nas"
  up=$(wait_danger $((base + 1)))
  sleep 3
  umount "$nas"
  down=$(wait_danger "$base")
  echo "  $i: mounted $up, unmounted $down"
done
