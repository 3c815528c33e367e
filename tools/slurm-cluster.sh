#!/usr/bin/env bash
# A SLURM cluster of three nodes, n1..n3, on this one host, for testing jobs that SLURM runs.
#
#   tools/slurm-cluster.sh start DIR   write DIR/slurm.conf, start munged (unless it runs),
#                                      slurmctld and one slurmd per node, and wait until sinfo
#                                      shows the three nodes idle
#   tools/slurm-cluster.sh stop DIR    stop the daemons that start began, and wait for them to end
#
# Everything SLURM writes (state, spool, logs, pid files) goes under DIR; clients find the
# cluster with SLURM_CONF=DIR/slurm.conf. The controller's port is SLURM_CLUSTER_PORT (6817)
# and the nodes' 17001..17003 plus that port's offset from 6817, so two clusters can coexist.
# Exits 2, saying why, when SLURM is missing (tools/system-deps.sh installs it).
set -euo pipefail

action=${1:-}
dir=${2:-}
if [ -z "$action" ] || [ -z "$dir" ]; then
    echo "usage: $0 start|stop DIR" >&2
    exit 64
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export SLURM_CONF=$dir/slurm.conf
port=${SLURM_CLUSTER_PORT:-6817}
node_port=$((17001 + port - 6817))
timeout=${SLURM_CLUSTER_TIMEOUT:-60}

installed() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        echo "SLURM is not installed (slurm-wlm and munge: make system-deps installs them)" >&2
        exit 2
    fi
}

write_conf() {
    local host
    host=$(hostname -s)
    mkdir -p "$dir/state" "$dir/spool"
    cat >"$SLURM_CONF" <<EOF
ClusterName=danaus
SlurmctldHost=$host
SlurmctldPort=$port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
ReturnToService=2
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
NodeName=n[1-3] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$node_port-$((node_port + 2))] CPUs=2 RealMemory=4000
PartitionName=debug Nodes=n[1-3] Default=YES State=UP MaxTime=INFINITE
EOF
}

wait_for() {
    local what=$1
    shift
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            echo "timed out after ${timeout}s waiting for $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

nodes_idle() {
    [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" = 3 ]
}

pid_alive() {
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

munge_running() {
    pid_alive /run/munge/munged.pid
}

start() {
    installed
    write_conf
    if ! munge_running; then
        mkdir -p /run/munge
        chown munge:munge /run/munge
        runuser -u munge -- /usr/sbin/munged
        touch "$dir/munged.ours"
    fi
    slurmctld -f "$SLURM_CONF"
    wait_for "slurmctld to answer" scontrol ping
    for node in n1 n2 n3; do
        slurmd -f "$SLURM_CONF" -N "$node"
    done
    wait_for "n1..n3 to be idle in sinfo" nodes_idle
    echo "SLURM cluster of n1..n3 up: SLURM_CONF=$SLURM_CONF"
}

all_ended() {
    local pid
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
    done
}

stop_pids() {
    # SIGTERM each daemon whose pid file names a live process, all at once, then wait for them
    local pids=() file
    for file in "$@"; do
        if pid_alive "$file"; then
            pids+=("$(cat "$file")")
        fi
    done
    if [ ${#pids[@]} -gt 0 ]; then
        kill "${pids[@]}"
        wait_for "daemons ${pids[*]} to end" all_ended "${pids[@]}"
    fi
}

stop() {
    if [ -f "$SLURM_CONF" ]; then
        scancel --full --quiet -p debug 2>/dev/null || true
        stop_pids "$dir"/slurmd.n[1-3].pid
        stop_pids "$dir/slurmctld.pid"
    fi
    if [ -f "$dir/munged.ours" ]; then
        stop_pids /run/munge/munged.pid
        rm -f "$dir/munged.ours"
    fi
}

case $action in
start) start ;;
stop) stop ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 64
    ;;
esac
