#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, from Debian's slurm-wlm and munge, then tests/slurm (pytest -m slurm)
# against it: sbatch, srun, scancel and scontrol for real.
#
# Run as root. Installs the two packages with apt-get (skipped when they are there), then starts a private
# cluster: its own munged (own key and socket), slurmctld and slurmd, with their configuration, state, logs
# and pid files in one temporary folder and their own ports (7817, 7818), bound to 127.0.0.1 only. Nothing
# under /etc is written and any cluster the machine already runs is left alone. The tests find it through
# SLURM_CONF. On exit (also on failure or Ctrl-C) every job is cancelled and the three daemons stop; the
# folder is removed after a pass and kept, with the logs' tails printed, after a failure.
#
# The node is named after this host, whose name must resolve to a loopback address (Debian's /etc/hosts does
# that): the daemons and the training processes, which meet at the first host of SLURM_NODELIST, listen on
# the address that name resolves to. The script says so and stops where it does not.
#
# Usage: scripts/slurm_check.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

if [ "$(id -u)" != 0 ]; then
    echo "slurm_check: must run as root (it installs packages and starts slurmctld, slurmd and munged)" >&2
    exit 1
fi
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
    . .venv/bin/activate
fi

missing=()
for command in munged mungekey slurmctld slurmd sbatch srun scancel scontrol sinfo squeue; do
    command -v "$command" >/dev/null || missing+=("$command")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "slurm_check: installing slurm-wlm and munge (missing: ${missing[*]})"
    apt_log="$(mktemp)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge; } >"$apt_log" 2>&1; then
        tail -n 30 "$apt_log" >&2
        echo "slurm_check: apt-get could not install slurm-wlm and munge (the log's tail is above)" >&2
        exit 1
    fi
    rm -f "$apt_log"
fi
installed=$SECONDS

node="$(hostname -s)"
address="$(getent ahostsv4 "$node" | awk 'NR == 1 {print $1}' || true)"
case "$address" in
    127.*) ;;
    *)
        echo "slurm_check: the host name '$node' does not resolve to a loopback address (it gives" \
            "'${address:-nothing}'), and the cluster's daemons and jobs listen where it does. Map it to one, e.g." \
            "\`echo '127.0.1.1 $node' >> /etc/hosts\`." >&2
        exit 1
        ;;
esac

CTLD_PORT=7817
SLURMD_PORT=7818
dir="$(mktemp -d /tmp/fabric-core-slurm.XXXXXX)"
chmod 755 "$dir"  # munged, which runs as the munge user, must reach its folder inside
mkdir -m 755 "$dir/munge" && chown munge:munge "$dir/munge"
mkdir "$dir/state" "$dir/spool" "$dir/log"
export SLURM_CONF="$dir/slurm.conf"
status=1

stop_cluster() {
    set +e
    if [ -f "$dir/slurmctld.pid" ]; then
        left="$(timeout 10 squeue -h -o %i 2>/dev/null)"
        if [ -n "$left" ]; then
            echo "slurm_check: cancelling the jobs left: $(echo $left)"
            timeout 10 scancel $left
            local deadline=$((SECONDS + 30))
            while [ "$SECONDS" -lt "$deadline" ] && [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; do
                sleep 1
            done
        fi
    fi
    for pid_file in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$pid_file" ] || continue
        pid="$(cat "$pid_file")"
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 "$pid" 2>/dev/null && echo "slurm_check: $(basename "$pid_file" .pid) ($pid) did not stop in 10 s: killed"
    done
    if [ "$status" = 0 ]; then
        rm -rf "$dir"
    else
        for log in "$dir"/log/*.log "$dir/munge/munged.log"; do
            [ -f "$log" ] && { echo "--- the last lines of $log"; tail -n 25 "$log"; }
        done
        echo "slurm_check: the cluster's folder is kept: $dir"
    fi
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

# The node as slurmd sees its hardware (CPUs, sockets, cores, memory).
hardware="$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //')"

cat > "$SLURM_CONF" <<EOF
# A one-node cluster written by scripts/slurm_check.sh; everything it keeps is under $dir.
ClusterName=fabric-core
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# Bind to the configured (loopback) addresses, not to every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (120 s by default).
AuthInfo=socket=$dir/munge/socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups (none to be had in many containers and sandboxes): processes are tracked through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# A job whose start time has come (a requeued one) starts within 2 s, not at the next minute.
SchedulerParameters=sched_interval=2
JobRequeue=1
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key"
runuser -u munge -- munged --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
slurmctld
slurmd

state=""
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
    state="$(timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null || true)"
    [ "$state" = idle ] && break
    sleep 1
done
if [ "$state" != idle ]; then
    echo "slurm_check: the node $node is not idle 60 s after the daemons started (sinfo says: '${state:-nothing}')" >&2
    exit 1
fi
ready=$SECONDS
echo "slurm_check: packages in $((installed - start)) s, cluster up in $((ready - installed)) s ($SLURM_CONF):"
timeout 10 sinfo

log="$dir/pytest.log"
python -m pytest -m slurm tests/slurm -q -rA --durations=0 "$@" 2>&1 | tee "$log"
if grep -Eq "[0-9]+ skipped" "$log"; then
    echo "slurm_check: tests were skipped although the cluster is up (see the SKIPPED lines above)" >&2
    exit 1
fi
status=0
echo "slurm_check: tests took $((SECONDS - ready)) s, $((SECONDS - start)) s in all"
