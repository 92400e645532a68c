#!/usr/bin/env bash
# Bring up a Slurm cluster of several nodes on this host: munged, slurmctld, and one slurmd per
# node ("node1".."nodeN"), each on its own port with its own spool directory, pid file and log
# (`slurmd -N NAME`, the names all resolving to 127.0.0.1), so that jobs land on different nodes
# and a node can be lost (its slurmd killed) while the others run on. Meant for development
# machines and CI containers that have no systemd, so the daemons are started by hand and their
# pid files are what slurm-down.sh uses to stop exactly them.
#
# Idempotent: daemons that are already running are left alone; a node Slurm had marked down
# (a lost node, a restarted slurmd) is resumed.  Needs root and Debian's slurm-wlm, slurm-client
# and munge packages (listed in scripts/apt-packages.txt).
#
# Knobs (environment):
#   FERRY_SLURM_ACCOUNTING=1  also run slurmdbd on a local MariaDB (socket only, no TCP), so that
#                       sacct works as on production clusters; needs Debian's slurmdbd and
#                       mariadb-server. Without it accounting is off (sacct fails: the snakemake
#                       profile polls with squeue). Switching modes restarts slurmctld/slurmd.
#   SLURM_CONF          where the config is written (default /etc/slurm/slurm.conf, where the
#                       client tools look without being told)
#   FERRY_SLURM_NODES   how many nodes (default 3)
#   FERRY_SLURM_CPUS    CPUs each node advertises (default: max(4, nproc)); more than the real
#                       cores is fine because SlurmdParameters=config_overrides trusts the file
#   FERRY_SLURM_MEM_MB  memory each node advertises (default: physical memory minus 1 GiB)
#   FERRY_SLURM_FORCE=1 overwrite a slurm.conf that this script did not write
set -euo pipefail

conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
marker="# managed by ferry scripts/slurm-up.sh"
run_dir=/run/slurm
log_dir=/var/log/slurm

die() { echo "slurm-up: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (the daemons need it)"
accounting=${FERRY_SLURM_ACCOUNTING:-0}
needed="munged slurmctld slurmd sbatch squeue scontrol sinfo"
[ "$accounting" = 1 ] && needed="$needed slurmdbd sacctmgr mariadbd mariadb"
for bin in $needed; do
    command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] ||
        die "$bin not found; install slurm-wlm slurm-client munge (scripts/apt-packages.txt)$(
            [ "$accounting" = 1 ] && echo ' and, for accounting, slurmdbd mariadb-server')"
done
export PATH="$PATH:/usr/sbin"

dbd_conf="$(dirname "$conf")/slurmdbd.conf"
for file in "$conf" "$dbd_conf"; do
    if [ -e "$file" ] && ! grep -qF "$marker" "$file" && [ "${FERRY_SLURM_FORCE:-0}" != 1 ]; then
        die "$file exists and was not written by this script; set FERRY_SLURM_FORCE=1 to replace it"
    fi
done

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# The daemons must not inherit our descriptors: one may be the lock of a caller running
# `flock /tmp/ferry-slurm.lock ...`, which munged would then hold for as long as it runs,
# locking everyone else out. (255 is the descriptor bash reads this script from.)
for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] && [ "$fd" -lt 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

# --- munge -----------------------------------------------------------------------------------
mkdir -p /run/munge /var/lib/munge /var/log/munge /etc/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
    # The Debian package normally creates the key; a stripped image may not have it.
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid; then
    # --force: a stale socket left by a killed munged would otherwise block the start.
    runuser -u munge -- munged --force
fi
for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
done
munge -n | unmunge >/dev/null || die "munge does not work (see /var/log/munge/munged.log)"

# --- accounting: MariaDB + slurmdbd ----------------------------------------------------------
if [ "$accounting" = 1 ]; then
    mkdir -p /run/mysqld /var/log/mysql "$run_dir" "$log_dir"
    chown mysql:mysql /run/mysqld /var/log/mysql
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    if ! mariadb -e 'SELECT 1' >/dev/null 2>&1; then
        # No TCP listener: slurmdbd reaches it through the socket. The marker tells
        # slurm-down.sh that this script, not the system, owns this server.
        setsid mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
            --log-error=/var/log/mysql/ferry-slurm.err </dev/null >/dev/null 2>&1 &
        touch "$run_dir/ferry-started-mariadb"
    fi
    for _ in $(seq 100); do
        mariadb -e 'SELECT 1' >/dev/null 2>&1 && break
        sleep 0.2
    done
    mariadb -e 'SELECT 1' >/dev/null || die "MariaDB did not come up (see /var/log/mysql/ferry-slurm.err)"
    # slurmdbd runs as root and logs in as MariaDB's root through the socket (unix_socket
    # authentication), so no database password exists to be stored or leaked.
    mariadb -e 'CREATE DATABASE IF NOT EXISTS slurm_acct_db'
    dbd_new=$(mktemp)
    cat > "$dbd_new" <<DBD
$marker
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$run_dir/slurmdbd.pid
LogFile=$log_dir/slurmdbd.log
DBD
    install -m 0600 "$dbd_new" "$dbd_conf"
    rm -f "$dbd_new"
    acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux"
else
    acct_lines="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi

# --- slurm.conf ------------------------------------------------------------------------------
cpus=${FERRY_SLURM_CPUS:-$(( $(nproc) > 4 ? $(nproc) : 4 ))}
mem_mb=${FERRY_SLURM_MEM_MB:-$(( $(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))}
node_count=${FERRY_SLURM_NODES:-3}
nodes=$(seq -f 'node%g' -s ' ' "$node_count")
node_list="node[1-$node_count]"
# One slurmd per node, each listening on its own port (6819 is slurmdbd's, so start above it).
node_lines=$(for i in $(seq "$node_count"); do
    echo "NodeName=node$i NodeAddr=127.0.0.1 NodeHostname=$(hostname) Port=$((6830 + i)) CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
done)
mkdir -p "$(dirname "$conf")" "$run_dir" "$log_dir" /var/spool/slurmd /var/spool/slurmctld
new_conf=$(mktemp)
cat > "$new_conf" <<CONF
$marker
ClusterName=ferry
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# linuxproc + task/none: cgroups are not delegated inside containers without systemd.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Lets the node advertise more CPUs than the machine has, so several small jobs overlap.
SlurmdParameters=config_overrides
# Jobs without a memory request would otherwise be given the whole node and run one at a time.
DefMemPerCPU=1024
ReturnToService=2
# snakemake's slurm executor polls finished jobs with squeue when accounting is off; squeue only
# sees a job while slurmctld keeps it, i.e. MinJobAge seconds after it ended.
MinJobAge=300
InactiveLimit=0
KillWait=10
SchedulerType=sched/backfill
# A lost node (its slurmd gone) is marked DOWN, and its jobs ended NODE_FAIL, within seconds; the
# pipelines retry such a job on another node. Production clusters use minutes.
SlurmdTimeout=10
# A job lost with its node ends NODE_FAIL instead of being requeued behind the pipeline's back:
# the pipeline's own retry (job_retries) runs it again, elsewhere, and its report says so.
JobRequeue=0
$acct_lines
# Without accounting, this file is the durable record that a job ran (tests read it).
JobCompType=jobcomp/filetxt
JobCompLoc=$log_dir/jobcomp.log
StateSaveLocation=/var/spool/slurmctld
# %n: the node's name, so the slurmd of each node keeps its own files.
SlurmdSpoolDir=/var/spool/slurmd/%n
# Also per node: PMIx makes each step's client directory under TmpFS, and two nodes' slurmstepd
# of one MPI step would otherwise collide on it ("File exists").
TmpFS=/var/spool/slurmd/%n/tmp
SlurmctldPidFile=$run_dir/slurmctld.pid
SlurmdPidFile=$run_dir/slurmd-%n.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd-%n.log
$node_lines
PartitionName=debug Nodes=$node_list Default=YES MaxTime=INFINITE State=UP
# A second partition on the same nodes: the pipelines' resources.<step>.slurm_partition has
# somewhere to send a step other than the default (tests/pipeline/test_slurm_requests.py).
PartitionName=ferry-alt Nodes=$node_list Default=NO MaxTime=INFINITE State=UP
CONF
conf_changed=0
if ! cmp -s "$new_conf" "$conf"; then
    install -m 0644 "$new_conf" "$conf"
    conf_changed=1
fi
rm -f "$new_conf"

# --- daemons ---------------------------------------------------------------------------------
# MPI jobs start with `srun --mpi=pmix` (Debian's Open MPI has no PMI2). slurmd loads the PMIx
# library when it starts, so a PMIx installed or upgraded since then needs a slurmd restart.
pmix_stamp="$run_dir/ferry-pmix.version"
pmix_now=$(dpkg-query -W -f='${Version}' libpmix2 2>/dev/null || echo none)
restart=""
[ "$conf_changed" = 1 ] && restart="slurmd slurmctld"
[ "$(cat "$pmix_stamp" 2>/dev/null)" != "$pmix_now" ] && restart="${restart:-slurmd}"
if [ -n "$restart" ]; then
    # Some settings (accounting storage among them) only take effect at start, not on
    # `scontrol reconfigure`: restart whatever runs with the old file.
    # slurmd*.pid: every node's slurmd, and the one slurmd of an older one-node layout.
    for daemon in $restart; do
        for pidfile in "$run_dir/$daemon".pid "$run_dir/$daemon"-*.pid; do
            alive "$pidfile" || continue
            pid=$(cat "$pidfile")
            kill -TERM "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && die "$daemon ($pid) did not stop for the config change"
            rm -f "$pidfile"
        done
    done
fi
if [ "$accounting" = 1 ]; then
    # sacctmgr reads slurm.conf, so this has to wait until the file names slurmdbd.
    alive "$run_dir/slurmdbd.pid" || slurmdbd
    for _ in $(seq 100); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.2
    done
    sacctmgr -n list cluster >/dev/null || die "slurmdbd did not come up (see $log_dir/slurmdbd.log)"
    # Registered before slurmctld starts, so its first contact with slurmdbd succeeds.
    sacctmgr -n list cluster format=cluster | grep -qw ferry || sacctmgr -i add cluster ferry >/dev/null
    sacctmgr -n list account format=account | grep -qw ferry ||
        sacctmgr -i add account ferry cluster=ferry description=ferry organization=ferry >/dev/null
    sacctmgr -n list user format=user | grep -qw root ||
        sacctmgr -i add user root account=ferry defaultaccount=ferry >/dev/null
    # A second account root may charge, for resources.<step>.slurm_account.
    sacctmgr -n list account format=account | grep -qw ferry-alt ||
        sacctmgr -i add account ferry-alt cluster=ferry description=ferry-alt organization=ferry >/dev/null
    sacctmgr -n list assoc user=root account=ferry-alt format=account | grep -qw ferry-alt ||
        sacctmgr -i add user root account=ferry-alt >/dev/null
fi
# -i: start even if saved state from an earlier run does not match the new config.
alive "$run_dir/slurmctld.pid" || slurmctld -i
for node in $nodes; do
    mkdir -p "/var/spool/slurmd/$node/tmp"
    alive "$run_dir/slurmd-$node.pid" || slurmd -N "$node"
done
echo "$pmix_now" > "$pmix_stamp"

for _ in $(seq 100); do
    scontrol ping 2>/dev/null | grep -q 'is UP' && break
    sleep 0.2
done
scontrol ping | grep -q 'is UP' || die "slurmctld did not come up (see $log_dir/slurmctld.log)"

# Every node usable: idle, or running jobs already.
usable() { case "$1" in idle*|mixed*|allocated*|completing*) return 0 ;; esac; return 1; }
for node in $nodes; do
    state=""
    for _ in $(seq 150); do
        state=$(sinfo -h -n "$node" -o '%T' 2>/dev/null | head -n1)
        usable "$state" && break
        case "$state" in
            down*|drain*|drained*|fail*)
                # A restarted slurmd (a node brought back after it was lost) is not a broken
                # node; let it back in.
                scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
        esac
        sleep 0.2
    done
    usable "$state" || die "node $node is '$state', not usable (see $log_dir/slurmd-$node.log)"
done
echo "slurm-up: nodes $node_list ($node_count) up, $cpus CPUs and $mem_mb MiB each, accounting $([ "$accounting" = 1 ] && echo on || echo off), config $conf"
