#!/usr/bin/env bash
# Runs the README's test command (go test ./...), and the csi/ module's,
# once as an unprivileged user (uid/gid 65534) on a copy of the checkout
# that it does not own, the way a Go developer without root runs it. The
# mount tests skip there (CI is unset for this run: they cannot run without
# root, and the root run of .ci/run is the one that must not skip them);
# everything else must pass, including the tests that build the CLI in a
# checkout owned by someone else. Needs root (to switch users); the copy
# is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "hack/test-unprivileged.sh: needs root to switch to uid 65534" >&2
  exit 1
fi

copy=$(mktemp -d /tmp/nodevol-unprivileged.XXXXXX)
trap 'rm -rf "$copy"' EXIT
# The tracked files as they are in the work tree, plus .git (owned by root,
# as a checkout owned by someone else is), readable by everyone.
git ls-files -z | xargs -0 cp --parents -t "$copy"
cp -a .git "$copy/.git"
# The module cache is root's (under /root): vendor the dependencies so the
# unprivileged run needs neither it nor the network.
(cd "$copy" && go mod vendor)
(cd "$copy/csi" && go mod vendor)
chmod -R a+rX "$copy"
install -d -m 0700 -o 65534 -g 65534 "$copy/.home"

gobin=$(dirname "$(command -v go)")
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --reset-env \
  env -u CI HOME="$copy/.home" GOCACHE="$copy/.home/cache" GOFLAGS=-mod=vendor GOPROXY=off \
  GOTOOLCHAIN=local PATH="$gobin:/usr/bin:/bin:/usr/sbin:/sbin" \
  bash -c 'cd "$1" && id && go test ./... && cd csi && go test ./...' _ "$copy"
