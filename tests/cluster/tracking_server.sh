#!/usr/bin/env bash
# A tracking server as a cluster runs one, on localhost, for the server tests: PostgreSQL as
# MLflow's backend store and `mlflow server --artifacts-destination`, so that runs, metrics,
# artifacts and models reach the store only over HTTP. Both listen on 127.0.0.1 only.
#
#   bash tests/cluster/tracking_server.sh install         # only install what is missing (PostgreSQL)
#   bash tests/cluster/tracking_server.sh up              # install what is missing, start both, wait
#   bash tests/cluster/tracking_server.sh down            # stop both, remove the state
#   bash tests/cluster/tracking_server.sh env             # the servers' addresses, the admin's password file
#   bash tests/cluster/tracking_server.sh stop-server     # the faults: the server gone ...
#   bash tests/cluster/tracking_server.sh start-server    # ... and back (the same store)
#   bash tests/cluster/tracking_server.sh restart-db      # PostgreSQL stopped and started
#
# A second server on the next port runs MLflow's basic-auth app (`--app-name basic-auth`),
# its users in its own SQLite file, its admin's password generated at `up`.
#
# Its state (the database cluster, the artifacts, the logs, the database password) lives in
# $TRACKING_STATE (default: tests/cluster/.tracking in the clone). PostgreSQL runs as the
# `postgres` user that Debian's package creates; the password is generated at `up` and kept
# in files only their owner reads: psql reads it on its standard input, the server through
# libpq's password file (PGPASSFILE). No password or key is ever on a command line, where
# every user of the machine could read it (`ps`, /proc/<pid>/cmdline).
#
# `up` after a run that was not torn down (killed) first stops what that run left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/daemons.sh
source "$here/daemons.sh"
root=$(cd "$here/../.." && pwd)
STATE=${TRACKING_STATE:-$here/.tracking}
DB_PORT=${TRACKING_DB_PORT:-15432}
PORT=${TRACKING_PORT:-15000}
MLFLOW=${MLFLOW:-$root/.venv/bin/mlflow}
PG_VERSION=15
PG_BIN=/usr/lib/postgresql/$PG_VERSION/bin

say() { echo "tracking_server: $*" >&2; }

install() {
    if [ ! -x "$PG_BIN/postgres" ]; then
        say "installing postgresql-$PG_VERSION"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$PG_VERSION" > "$STATE/apt.log" 2>&1
    fi
}

as_postgres() { runuser -u postgres -- "$@"; }

pg_ctl() { as_postgres "$PG_BIN/pg_ctl" -D "$STATE/pg" -l "$STATE/socket/postgres.log" -w "$@"; }

start_database() {
    pg_ctl -o "-c listen_addresses=127.0.0.1 -p $DB_PORT -k $STATE/socket" start > /dev/null
}

create_database() {
    mkdir -p "$STATE/pg" "$STATE/socket"  # the socket folder holds its log too
    chown postgres:postgres "$STATE/pg" "$STATE/socket"
    umask 077
    head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$STATE/db_password"
    printf '127.0.0.1:%s:*:mlflow:%s\n' "$DB_PORT" "$(cat "$STATE/db_password")" > "$STATE/pgpass"
    as_postgres "$PG_BIN/initdb" -D "$STATE/pg" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        > "$STATE/initdb.log"
    umask 022
    start_database
    # printf is a builtin: the statement reaches psql through a pipe, not its arguments
    printf "CREATE USER mlflow PASSWORD '%s';\nCREATE DATABASE mlflow OWNER mlflow;\nCREATE DATABASE mlflow_auth OWNER mlflow;\n" \
        "$(cat "$STATE/db_password")" | as_postgres psql -h "$STATE/socket" -p "$DB_PORT" -U postgres -q -v ON_ERROR_STOP=1
}

server_up() { curl -fsS "http://127.0.0.1:${1:-$PORT}/health" > /dev/null 2>&1; }

start_server() {  # start_server [auth]
    local port=$PORT database=mlflow name=server app=()
    if [ "${1:-}" = auth ]; then
        port=$((PORT + 1)) database=mlflow_auth name=auth app=(--app-name basic-auth)
        write_auth_config
    fi
    mkdir -p "$STATE/$name-artifacts"
    # setsid: the server and its workers are one process group, stopped together.
    PGPASSFILE="$STATE/pgpass" MLFLOW_AUTH_CONFIG_PATH="$STATE/basic_auth.ini" \
        MLFLOW_FLASK_SERVER_SECRET_KEY=$(head -c 16 /dev/urandom | base64) \
        setsid "$MLFLOW" server --host 127.0.0.1 --port "$port" "${app[@]}" \
        --backend-store-uri "postgresql://mlflow@127.0.0.1:$DB_PORT/$database" \
        --artifacts-destination "$STATE/$name-artifacts" --workers 2 \
        >> "$STATE/$name.log" 2>&1 < /dev/null &
    echo $! > "$STATE/$name.pid"
    wait_for 120 "the tracking $name server" server_up "$port"
}

write_auth_config() {
    if [ ! -s "$STATE/admin_password" ]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$STATE/admin_password")
    fi
    (umask 077 && printf '%s\n' "[mlflow]" "default_permission = READ" \
        "database_uri = sqlite:///$STATE/basic_auth.db" "admin_username = admin" \
        "admin_password = $(cat "$STATE/admin_password")" \
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth" > "$STATE/basic_auth.ini")
}

stop_server() {  # stop_server [auth]
    local name=${1:-server}
    [ -e "$STATE/$name.pid" ] || return 0
    local pid
    pid=$(cat "$STATE/$name.pid")
    kill -TERM -- "-$pid" 2> /dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$pid" 2> /dev/null || true
    rm -f "$STATE/$name.pid"
}

up() {
    if [ -e "$STATE/server.pid" ] || [ -e "$STATE/pg/postmaster.pid" ]; then
        say "stopping what an earlier run left"
        down
    fi
    if server_up || server_up $((PORT + 1)); then
        say "refusing: something this script did not start answers on 127.0.0.1:$PORT"
        exit 3
    fi
    mkdir -p "$STATE"
    install
    if [ -d "$STATE/pg" ]; then
        start_database
    else
        create_database
    fi
    start_server
    start_server auth
    say "up: http://127.0.0.1:$PORT and, with basic-auth, :$((PORT + 1)) (PostgreSQL on 127.0.0.1:$DB_PORT)"
}

down() {
    stop_server
    stop_server auth
    if [ -e "$STATE/pg/postmaster.pid" ]; then
        pg_ctl -m fast stop > /dev/null 2>&1 || pg_ctl -m immediate stop > /dev/null 2>&1 || true
    fi
    rm -rf "$STATE"
}

case "${1:-}" in
    install)
        mkdir -p "$STATE"
        install
        ;;
    up) up ;;
    down) down ;;
    env)
        echo "MLFLOW_TRACKING_URI=http://127.0.0.1:$PORT"
        echo "AUTH_TRACKING_URI=http://127.0.0.1:$((PORT + 1))"
        echo "AUTH_ADMIN_PASSWORD_FILE=$STATE/admin_password"
        ;;
    stop-server) stop_server ;;
    start-server) start_server ;;
    restart-db) pg_ctl -m fast restart > /dev/null ;;
    *)
        echo "usage: $0 install|up|down|env|stop-server|start-server|restart-db" >&2
        exit 2
        ;;
esac
