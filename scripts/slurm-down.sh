#!/usr/bin/env bash
# Stop the cluster started by slurm-up.sh: exactly the daemons named in its pid files.
# Job state and logs stay on disk so a later slurm-up.sh (or a post-mortem) can use them; the
# slurm.conf this cluster was started with does not (see the end).
set -euo pipefail

[ "$(id -u)" -eq 0 ] || { echo "slurm-down: must run as root" >&2; exit 1; }

stop() {
    local name=$1 pidfile=$2 pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "slurm-down: $name ($pid) ignored SIGTERM for 10 s, killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pidfile"
}

# Every node's slurmd first, so none reports its node as lost to a controller that is going away.
for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmd-*.pid; do stop slurmd "$pidfile"; done
stop slurmctld /run/slurm/slurmctld.pid
stop slurmdbd /run/slurm/slurmdbd.pid
if [ -e /run/slurm/ferry-started-mariadb ]; then
    # Only a MariaDB that slurm-up.sh started for accounting; a system one is left running.
    stop mariadbd /run/mysqld/mysqld.pid
    rm -f /run/slurm/ferry-started-mariadb
fi
stop munged /run/munge/munged.pid

# With a slurm.conf naming a controller that is not running, every Slurm client call waits out
# its message timeout, and snakemake-executor-plugin-slurm makes one (`scontrol show config`) at
# import — on every Snakemake start, local profile included: ~9 s each. Without a slurm.conf the
# clients fail at once. slurm-up.sh writes the file anew, so only one it wrote is removed.
marker="# managed by ferry scripts/slurm-up.sh"
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
for file in "$conf" "$(dirname "$conf")/slurmdbd.conf"; do
    if [ -f "$file" ] && grep -qF "$marker" "$file"; then
        rm -f "$file"
    fi
done
echo "slurm-down: stopped"
