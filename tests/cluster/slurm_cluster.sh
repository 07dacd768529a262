#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost for the cluster tests: munge, MariaDB,
# slurmdbd (accounting), slurmctld and slurmd, with one node of this machine's cores and
# memory and one partition, `main`.
#
#   bash tests/cluster/slurm_cluster.sh install  # only install what is missing (Debian's packages)
#   bash tests/cluster/slurm_cluster.sh up     # install what is missing, start, wait until ready
#   bash tests/cluster/slurm_cluster.sh down   # stop every daemon it started, remove its state
#   bash tests/cluster/slurm_cluster.sh env    # the exports a client needs (the default SLURM_CONF)
#
# Its state, logs and database live in $CLUSTER_STATE (default: tests/cluster/.state in the
# clone); its slurm.conf and slurmdbd.conf go where every SLURM command and job looks for
# them, /etc/slurm, marked as this script's; munge uses its own /run/munge. The daemons run
# as root. It refuses to start where a SLURM daemon runs that it did not start or where
# /etc/slurm holds a configuration it did not write, and `down` stops only the daemons
# whose pid files it wrote and removes only its own configuration. Needs root and a writable
# cgroup v1 pids hierarchy: `up` starts the daemons in a cgroup of their own, which every
# process they start stays in (SLURM's jobs, and a job's process that left its parent or
# its session), so that `down` ends what is left there after SLURM has ended its jobs,
# never looking through other processes. `up` after a run that was not torn down (killed)
# first stops what that run left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/daemons.sh
source "$here/daemons.sh"
STATE=${CLUSTER_STATE:-$here/.state}
PACKAGES=(slurm-wlm slurmdbd slurm-client munge mariadb-server)
DB_PORT=${CLUSTER_DB_PORT:-13306}
CONF=/etc/slurm
CONFIGS=("$CONF/slurm.conf" "$CONF/slurmdbd.conf")
# the daemons' cgroup, one per state folder (a test holds a cluster in a folder of its own)
CGROUP=/sys/fs/cgroup/pids/basis-slurm-$(echo "$STATE" | md5sum | cut -c1-12)
MARK="# written by basis-repro tests/cluster/slurm_cluster.sh"

say() { echo "slurm_cluster: $*" >&2; }

ours() {  # pids of the daemons this script started (from its pid files) that still run
    local file
    for file in "$STATE"/*.pid; do
        [ -e "$file" ] || continue
        local pid
        pid=$(cat "$file")
        kill -0 "$pid" 2> /dev/null && echo "$pid"
    done
    return 0
}

install() {
    local missing=()
    local package
    for package in "${PACKAGES[@]}"; do
        dpkg -s "$package" > /dev/null 2>&1 || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > "$STATE/apt.log" 2>&1
    fi
}

write_configs() {
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024))
    mkdir -p "$CONF"
    cat > "$CONF/slurm.conf" << EOF
$MARK
ClusterName=basis
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=16819
JobCompType=jobcomp/none
# The executor plugin names each job's rule in its comment; accounting keeps it for sacct.
AccountingStoreFlags=job_comment
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SchedulerType=sched/backfill
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$CONF/slurmdbd.conf" << EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=16819
SlurmUser=root
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$CONF/slurmdbd.conf"
}

start_munge() {
    if pgrep -x munged > /dev/null; then
        return 0  # munge is shared by every SLURM on the machine; a running one is fine
    fi
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
    [ -s /etc/munge/munge.key ] || { mungekey --create --force && chown munge:munge /etc/munge/munge.key; }
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    cp /run/munge/munged.pid "$STATE/munged.pid"
}

start_database() {
    mkdir -p "$STATE/db"
    if [ ! -d "$STATE/db/mysql" ]; then
        mariadb-install-db --datadir="$STATE/db" --user=root --auth-root-authentication-method=normal \
            --skip-test-db > "$STATE/db-install.log" 2>&1
    fi
    mariadbd --datadir="$STATE/db" --user=root --port="$DB_PORT" --bind-address=127.0.0.1 \
        --socket="$STATE/db.sock" --pid-file="$STATE/mariadb.pid" --log-error="$STATE/mariadb.log" \
        --skip-name-resolve > /dev/null 2>&1 &
    wait_for 60 MariaDB mariadb --socket="$STATE/db.sock" -uroot -e "select 1"
    mariadb --socket="$STATE/db.sock" -uroot -e \
        "create database if not exists slurm_acct_db; alter user 'root'@'localhost' identified by '';
         create user if not exists 'root'@'127.0.0.1'; grant all on *.* to 'root'@'127.0.0.1';"
}

up() {
    local foreign
    foreign=$( (pgrep -x slurmctld; pgrep -x slurmd; pgrep -x slurmdbd) || true)
    if [ -n "$foreign" ] && [ -z "$(ours)" ]; then
        say "refusing: a SLURM daemon this script did not start runs here (pids: $foreign)"
        exit 3
    fi
    if [ -n "$(ours)" ]; then
        say "stopping what an earlier run left"
        down
        mkdir -p "$STATE"
    fi
    if ! mkdir -p "$CGROUP" 2> /dev/null; then
        say "refusing: the daemons and their jobs are kept in a cgroup, and $(dirname "$CGROUP") is not writable here"
        exit 3
    fi
    echo $$ > "$CGROUP/cgroup.procs"  # this script, and so everything it starts from here on
    local file
    for file in "${CONFIGS[@]}"; do
        if [ -e "$file" ] && ! grep -qxF "$MARK" "$file"; then
            say "refusing: $file is a SLURM configuration this script did not write"
            exit 3
        fi
    done
    mkdir -p "$STATE"/ctld "$STATE"/slurmd
    install
    write_configs
    start_munge
    start_database
    slurmdbd
    wait_for 60 slurmdbd sacctmgr -i list cluster
    sacctmgr -i add cluster basis > /dev/null 2>&1 || true
    sacctmgr -i add account basis Cluster=basis > /dev/null 2>&1 || true
    sacctmgr -i add user root Account=basis Cluster=basis > /dev/null 2>&1 || true
    slurmctld -i
    slurmd
    wait_for 90 "the node to be idle" bash -c '[ "$(sinfo -h -o %T)" = idle ]'
    wait_for 30 "sacct" sacct -n -X
    say "up: $(sinfo -h -o '%P %D %c CPUs %m MB %T')"
}

jobs_gone() { [ -z "$(squeue -h -o %i 2> /dev/null)" ] && [ -z "$(scontrol listpids 2> /dev/null | tail -n +2)" ]; }

down() {
    local pid file
    if [ -e "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2> /dev/null; then
        scancel --user=root > /dev/null 2>&1 || true  # SLURM ends its jobs as it tracks them
        wait_for 60 "the cancelled jobs to end" jobs_gone || true
    fi
    for file in slurmd slurmctld slurmdbd mariadb munged; do
        [ -e "$STATE/$file.pid" ] || continue
        pid=$(cat "$STATE/$file.pid")
        kill "$pid" 2> /dev/null || true
        for _ in $(seq 1 20); do
            kill -0 "$pid" 2> /dev/null || break
            sleep 0.5
        done
        kill -9 "$pid" 2> /dev/null || true
    done
    # what the daemons started and that outlived its job (a process that left its parent):
    # it is in their cgroup, whatever its parent or session
    if [ -e "$CGROUP/cgroup.procs" ]; then
        for _ in 1 2 3; do
            xargs -r kill -9 < "$CGROUP/cgroup.procs" 2> /dev/null || true
            sleep 0.5
        done
        rmdir "$CGROUP" 2> /dev/null || true
    fi
    for file in "${CONFIGS[@]}"; do
        [ -e "$file" ] && grep -qxF "$MARK" "$file" && rm -f "$file"
    done
    rm -rf "$STATE"
    say "down"
}

mkdir -p "$STATE"
case "${1:-}" in
    install) install ;;
    up) up ;;
    down) down ;;
    env) echo "export SLURM_CONF=$CONF/slurm.conf" ;;
    *)
        echo "usage: $0 install|up|down|env" >&2
        exit 2
        ;;
esac
