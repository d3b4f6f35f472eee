#!/usr/bin/env bash
# Runs shellcheck on every script of hack/ and .ci/run (`make shellcheck`, a phase of `make check` and
# `make test`). Follows sourced files (-x). Installs Debian's shellcheck when it is missing and
# this runs as root (a new machine has nothing installed by hand); fails with the command to run
# otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v shellcheck >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[shellcheck] installing Debian's shellcheck (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1; } \
      || { echo "[shellcheck] apt-get install shellcheck failed" >&2; exit 1; }
  else
    echo "[shellcheck] shellcheck is not installed: apt-get install shellcheck (or your system's package)" >&2
    exit 1
  fi
fi

mapfile -t scripts < <(git ls-files 'hack/*.sh' '.ci/run')
shellcheck -x "${scripts[@]}"
echo "[shellcheck] ${#scripts[@]} scripts clean ($(shellcheck --version | sed -n 's/^version: //p'))" >&2
