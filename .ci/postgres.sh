# Sourced by .ci/run: a throwaway PostgreSQL server for the postgres store tests.
#
# Installs Debian's `postgresql` package as root if the server binaries are missing (without
# creating or starting the system cluster), then runs a private server as an unprivileged
# user in a temporary directory (127.0.0.1 on a free port, socket in that directory, trust
# auth, durability off: it only holds test data) and exports CTXFOLD_TEST_POSTGRES_DSN and
# CTXFOLD_REQUIRE_POSTGRES=1, so the postgres cases run and never skip. The server is stopped
# and the directory removed on EXIT. Any failure stops CI.

# Compose EXIT traps: the new command runs first, then whatever was registered before.
ci_add_exit_trap() {
  local new=$1 prev
  prev=$(trap -p EXIT)                           # "trap -- 'cmd' EXIT" or empty
  if [ -n "$prev" ]; then eval "set -- $prev"; prev=$3; fi   # unquote it
  # set +e: a failing hook must not skip the older ones; each hook still sees the script's $?
  trap -- '__ci_rc=$?; set +e; (exit $__ci_rc); '"$new"'; (exit $__ci_rc)'"${prev:+; $prev}" EXIT
}

_pg_find_bindir() {                              # newest /usr/lib/postgresql/N/bin, else PATH
  local d
  while IFS= read -r d; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV)
  d=$(command -v initdb 2>/dev/null) || return 1
  d=$(dirname "$(readlink -f "$d")")
  [ -x "$d/pg_ctl" ] && echo "$d"
}

_pg_install() {                                  # root only; no system cluster, no service start
  (
    set -e
    export DEBIAN_FRONTEND=noninteractive
    conf=/etc/postgresql-common dropin=zz-ctxfold-ci.conf made_policy=
    [ -e /usr/sbin/policy-rc.d ] || made_policy=1
    trap 'rm -f "$conf/createcluster.d/$dropin"; rmdir "$conf/createcluster.d" "$conf" 2>/dev/null || :
          [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d' EXIT
    mkdir -p "$conf/createcluster.d"
    echo 'create_main_cluster = false' >"$conf/createcluster.d/$dropin"
    if [ -n "$made_policy" ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod 755 /usr/sbin/policy-rc.d; fi
    timeout 600 apt-get update -qq
    timeout 900 apt-get install -y -qq --no-install-recommends postgresql
  ) >/dev/null 2>&1
}

_pg_as() {                                       # pg_ctl/initdb refuse to run as root
  if [ "$(id -u)" = 0 ]; then (cd "$pg_dir" && runuser -u "$pg_user" -- "$@"); else "$@"; fi
}

_pg_stop() {
  [ -n "${pg_dir:-}" ] && [ -d "$pg_dir" ] || return 0
  if [ -f "$pg_dir/data/postmaster.pid" ]; then
    _pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 \
      || kill -9 "$(head -n1 "$pg_dir/data/postmaster.pid")" 2>/dev/null || true
  fi
  rm -rf "$pg_dir"
}

_pg_start() {                # set -e is off inside `if _pg_start`: every step checks itself
  local i p
  pg_user=$(id -un)
  if [ "$(id -u)" = 0 ]; then
    pg_user=${CTXFOLD_PG_USER:-}
    [ -n "$pg_user" ] || { getent passwd postgres >/dev/null && pg_user=postgres; } || pg_user=nobody
  fi
  pg_dir=$(mktemp -d /tmp/ctxfold-pg.XXXXXX) || return 1   # short path: socket name <108 bytes
  ci_add_exit_trap _pg_stop
  if [ "$(id -u)" = 0 ]; then chown "$pg_user" "$pg_dir" || return 1; fi
  _pg_as "$pg_bin/initdb" -D "$pg_dir/data" -U ctxfold -A trust -E UTF8 --no-locale -N \
    >"$pg_dir/initdb.log" 2>&1 || { cat "$pg_dir/initdb.log"; return 1; }
  printf '%s\n' "local all all trust" "host all all 127.0.0.1/32 trust" >"$pg_dir/data/pg_hba.conf"
  cat >>"$pg_dir/data/postgresql.conf" <<EOF || return 1
listen_addresses = '127.0.0.1'
unix_socket_directories = '$pg_dir'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  pg_port=
  for i in 1 2 3 4 5; do                         # random port; retry if it turns out taken
    p=$((20000 + RANDOM % 30000))
    if (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi   # something listens
    if _pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -o "-p $p" \
      -w -t 60 start >/dev/null 2>&1; then pg_port=$p; break; fi
  done
  [ -n "$pg_port" ] || { tail -n 20 "$pg_dir/server.log" 2>/dev/null; return 1; }
  for i in $(seq 30); do
    "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -t 2 && break
    [ "$i" -lt 30 ] || return 1; sleep 1
  done
  "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U ctxfold ctxfold_test || return 1
  export CTXFOLD_TEST_POSTGRES_DSN="postgresql://ctxfold@127.0.0.1:$pg_port/ctxfold_test"
}

pg_bin=$(_pg_find_bindir) || pg_bin=
if [ -z "$pg_bin" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    _pg_install || { echo "postgresql could not be installed; the postgres store tests need it"; exit 1; }
    pg_bin=$(_pg_find_bindir) || { echo "postgresql installed but initdb/pg_ctl not found"; exit 1; }
  else
    echo "PostgreSQL server binaries are not installed and cannot be installed here (needs root and apt-get)"
    exit 1
  fi
fi
_pg_start || { echo "could not start the PostgreSQL test server"; exit 1; }
echo "postgres: $CTXFOLD_TEST_POSTGRES_DSN ($pg_bin, user $pg_user)"
export CTXFOLD_REQUIRE_POSTGRES=1
