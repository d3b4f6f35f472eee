#!/usr/bin/env bash
# The dependency policy (deny.toml), checked offline by cargo-deny at the version pinned in
# hack/tools.sh (a phase of `make check`):
#
#   hack/deps.sh check     licenses from deny.toml's allow list, no second version of a crate
#                          that deny.toml does not list with its reason, crates only from the
#                          crate registry, and the RustSec advisories (vulnerabilities,
#                          unmaintained, unsound, yanked) of the snapshot in hack/advisory-db
#   hack/deps.sh refresh-advisories [GIT_DIR]
#                          rewrite hack/advisory-db from a clone of the RustSec advisory database
#                          (GIT_DIR: any clone, bare or not, at the commit to take; default: a
#                          shallow clone of ADVISORY_DB_URL, where a network allows), then commit
#                          the result
#
# The snapshot (hack/advisory-db, CC0 like its source): the advisories of every crate name in
# Cargo.lock (crates/NAME/*.md, unchanged), INDEX (every crate name the whole database has an
# advisory for) and SNAPSHOT (source, commit, the commit's date, when it was taken). `check`
# refuses a Cargo.lock with a crate that has advisories in INDEX but none in the snapshot (a new
# dependency: refresh), and says how old the snapshot is. cargo-deny reads a database only as a
# git repository under its db-path (deny.toml: target/advisory-dbs): `check` makes one there from
# the snapshot, committed with the snapshot's date, and runs `cargo deny --offline`.
#
# Env: ADVISORY_DB_URL (refresh's source, default the RustSec repository), SSO_DEPS_MAX_AGE_DAYS
# (the age in days past which `check` warns that the snapshot is old, default 90).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
SNAP=hack/advisory-db
# The directory name cargo-deny derives from its default database URL (the last path segment
# and a hash of the URL; see url_to_db_path in cargo-deny's src/advisories/helpers/db.rs).
DB_DIR=target/advisory-dbs/advisory-db-3157b0e258782691
ADVISORY_DB_URL=${ADVISORY_DB_URL:-https://github.com/rustsec/advisory-db}

log() { printf '[deps] %s\n' "$*" >&2; }
die() { printf '[deps] error: %s\n' "$*" >&2; exit 1; }

# The crate names of Cargo.lock, one a line, sorted.
lock_names() { sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.lock | sort -u; }

snapshot_field() { sed -n "s/^$1: //p" "$REPO/$SNAP/SNAPSHOT"; }

cmd_refresh() {
  local src=${1:-} tmp=
  if [ -z "$src" ]; then
    tmp=$(mktemp -d)
    log "cloning $ADVISORY_DB_URL (shallow)"
    git clone -q --depth 1 "$ADVISORY_DB_URL" "$tmp/db" || die "git clone $ADVISORY_DB_URL failed (no network? pass a clone: hack/deps.sh refresh-advisories GIT_DIR)"
    src=$tmp/db
  fi
  git -C "$src" rev-parse --verify -q HEAD:crates >/dev/null || die "$src is not a clone of the advisory database (no crates/ at HEAD)"
  local commit date
  commit=$(git -C "$src" rev-parse HEAD)
  date=$(git -C "$src" show -s --format=%cI HEAD)
  rm -rf "$SNAP"
  mkdir -p "$SNAP/crates"
  git -C "$src" ls-tree -d --name-only HEAD crates/ | sed 's#^crates/##' | sort -u >"$SNAP/INDEX"
  local name n=0 files=0 f
  while read -r name; do
    grep -qxF -- "$name" "$SNAP/INDEX" || continue
    mkdir -p "$SNAP/crates/$name"
    n=$((n + 1))
    while read -r f; do
      git -C "$src" show "HEAD:$f" >"$SNAP/$f"
      files=$((files + 1))
    done < <(git -C "$src" ls-tree -r --name-only HEAD "crates/$name/")
  done < <(lock_names)
  git -C "$src" show HEAD:LICENSE.txt >"$SNAP/LICENSE.txt" 2>/dev/null || true
  {
    echo "source: ${ADVISORY_DB_URL}"
    echo "commit: $commit"
    echo "date: $date"
    echo "taken: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "crates: $n of Cargo.lock's $(lock_names | wc -l) names have advisories ($files files)"
  } >"$SNAP/SNAPSHOT"
  [ -z "$tmp" ] || rm -rf "$tmp"
  log "hack/advisory-db: commit ${commit:0:12} of $date; $files advisories of $n crates of Cargo.lock; INDEX: $(wc -l <"$SNAP/INDEX") names"
}

# The database cargo-deny reads: a git repository made from the snapshot (made again when the
# snapshot changed).
make_db() {
  local stamp
  stamp=$(cd "$SNAP" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
  if [ -s "$DB_DIR/.snapshot-stamp" ] && [ "$(cat "$DB_DIR/.snapshot-stamp")" = "$stamp" ] && [ -d "$DB_DIR/.git" ]; then return; fi
  rm -rf "$DB_DIR"
  mkdir -p "$DB_DIR"
  cp -r "$SNAP/crates" "$DB_DIR/crates"
  local date
  date=$(snapshot_field date)
  ( cd "$DB_DIR"
    git init -q -b main .
    git add crates
    GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date git -c user.name=snapshot -c user.email=snapshot@localhost \
      -c commit.gpgsign=false commit -q -m "snapshot of $(snapshot_field commit)" )
  echo "$stamp" >"$DB_DIR/.snapshot-stamp"
}

cmd_check() {
  { [ -s "$SNAP/SNAPSHOT" ] && [ -s "$SNAP/INDEX" ]; } || die "no advisory snapshot in $SNAP (hack/deps.sh refresh-advisories)"
  eval "$(hack/tools.sh cargo-deny)"
  # Crates of Cargo.lock that the database has advisories for, missing from the snapshot.
  local missing
  missing=$(comm -12 <(lock_names) "$SNAP/INDEX" | while read -r n; do [ -d "$SNAP/crates/$n" ] || echo "$n"; done | tr '\n' ' ')
  [ -z "$missing" ] || die "Cargo.lock has crates with advisories that the snapshot lacks: $missing(hack/deps.sh refresh-advisories, where a network allows)"
  local date age max=${SSO_DEPS_MAX_AGE_DAYS:-90}
  date=$(snapshot_field date)
  age=$((($(date +%s) - $(date -d "$date" +%s)) / 86400))
  make_db
  # The crates of Cargo.lock in Cargo's cache (cargo-deny reads their manifests and licenses, and
  # the yanked flags from Cargo's index cache, offline); a no-op when they are there already.
  cargo fetch --locked -q >/dev/null 2>&1 || log "warning: cargo fetch --locked failed: checking with what Cargo's cache has"
  log "cargo-deny $("$CARGO_DENY_BIN/cargo-deny" --version | awk '{print $2}'); advisories: RustSec snapshot $(snapshot_field commit | cut -c1-12) of ${date%%T*} ($age days old), $(find "$SNAP/crates" -name '*.md' | wc -l) advisories of $(find "$SNAP/crates" -mindepth 1 -maxdepth 1 -type d | wc -l) crates of Cargo.lock"
  [ "$age" -le "$max" ] || log "warning: the advisory snapshot is $age days old (over $max): hack/deps.sh refresh-advisories where a network allows"
  local out rc=0
  out=$("$CARGO_DENY_BIN/cargo-deny" --offline --locked --color never check --hide-inclusion-graph 2>&1) || rc=$?
  if [ "$rc" != 0 ]; then
    printf '%s\n' "$out" >&2
    die "the dependency policy (deny.toml) fails: see above"
  fi
  # Warnings (an unmaintained crate deeper in the graph, a skip no longer needed) are shown.
  grep -E '^(warning|note)\[' -A3 <<<"$out" >&2 || true
  log "ok: $(tail -n1 <<<"$out")"
}

case ${1:-} in
  check) cmd_check ;;
  refresh-advisories) shift; cmd_refresh "$@" ;;
  *) echo "usage: $0 check | refresh-advisories [GIT_DIR]" >&2; exit 2 ;;
esac
