#!/usr/bin/env bash
# A real Slurm cluster of two "nodes" on one Linux machine, for the lessons on multi-node training.
#
#   sudo cluster/slurm/local_cluster.sh up [STATE_DIR]     # default STATE_DIR=/tmp/mgtutor-slurm
#   sudo cluster/slurm/local_cluster.sh exec sbatch -N2 cluster/slurm/train.sbatch --data ...
#   sudo cluster/slurm/local_cluster.sh exec squeue
#   sudo cluster/slurm/local_cluster.sh shape 1gbit        # or: shape off
#   sudo cluster/slurm/local_cluster.sh status             # check: could `up` start one here?
#   sudo cluster/slurm/local_cluster.sh down [STATE_DIR]
#
# Each node is a network namespace (mgt-node1, mgt-node2) plus a UTS namespace (its hostname,
# node1/node2), joined by one veth pair on 10.213.0.0/24: node1 = 10.213.0.1, node2 = 10.213.0.2.
# Why namespaces and not containers: slurmd, slurmstepd and the training processes are ordinary
# processes of this machine (same files, same Python venv), only their network and hostname differ,
# which is exactly what multi-node training depends on (a worker finds its peers by address).
# Why a veth pair and no route to the host: TensorFlow's gRPC server and slurmctld accept whoever
# connects, unauthenticated; inside the two namespaces nothing outside them can reach them, and they
# cannot send anywhere else. Clients (sbatch, squeue, ...) therefore run on the head node, node1,
# through `exec`, as a login node would be part of the cluster's network.
# Each node owns one core (node1 CPU 0, node2 CPU 1): its slurmd is started under `taskset`, and with
# TaskPlugin=task/none every job step inherits that mask, so a job sees what a 1-CPU node would give.
set -euo pipefail

NODES=(node1 node2)
NETNS_PREFIX=mgt-
SUBNET=10.213.0
CTLD_PORT=6817
SLURMD_PORT=6818
DEFAULT_STATE=/tmp/mgtutor-slurm
DEFAULT_MUNGE_SOCKET=/run/munge/munge.socket.2

say() { echo "local_cluster: $*"; }
die() { echo "local_cluster: $1" >&2; exit "${2:-1}"; }

need_root() {
    # Namespaces, veths, /etc/netns and daemons that run as root: nothing here works unprivileged,
    # so refuse before changing anything rather than half-build a cluster.
    [[ $(id -u) -eq 0 ]] || die "needs root: run sudo make cluster-up (or sudo $0 $*)" 2
}

node_ip() { echo "$SUBNET.${1#node}"; }          # node1 -> 10.213.0.1
netns_of() { echo "$NETNS_PREFIX$1"; }           # node1 -> mgt-node1
veth_of() { echo "${NETNS_PREFIX}veth${1#node}"; }  # node1 -> mgt-veth1

# Absolute: the daemons change to / when they start, and read their files from there.
state_dir() { realpath -m -- "${1:-${MGTUTOR_SLURM_STATE:-$DEFAULT_STATE}}"; }

# The state dir remembers which STATE_DIR the last `up` used, so status/exec/shape need no argument.
CURRENT_FILE=/run/mgtutor-slurm.state
OWNER_FILE=/run/mgtutor-slurm.owner  # "pid start-time" of the program that brought it up, if one did
SPOOL=/run/mgtutor-slurm-spool
current_state() {
    if [[ -n ${MGTUTOR_SLURM_STATE:-} ]]; then echo "$MGTUTOR_SLURM_STATE"
    elif [[ -f $CURRENT_FILE ]]; then cat "$CURRENT_FILE"
    else echo "$DEFAULT_STATE"; fi
}
# The state of the cluster that is up, whatever this call was told (a new `up` may name another).
up_state() { if [[ -f $CURRENT_FILE ]]; then cat "$CURRENT_FILE"; else current_state; fi; }

check_tools() {
    local tool missing=()
    for tool in ip unshare nsenter taskset slurmd slurmctld munged munge sinfo; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) || die "missing: ${missing[*]} (apt install slurm-wlm munge iproute2 util-linux)" 2
}

# ---------------------------------------------------------------- munge
# Slurm authenticates every message with munge; all namespaces share one munged through its unix
# socket (a path in the file system, which network namespaces do not separate).
munge_works() { munge -n -S "$1" 2>/dev/null | unmunge -S "$1" >/dev/null 2>&1; }

start_munge() {
    local state=$1 dir
    if munge_works "$DEFAULT_MUNGE_SOCKET"; then
        # Someone's munged (a system service) is running: use it, and leave it running at `down`.
        echo "$DEFAULT_MUNGE_SOCKET" >"$state/munge.socket-path"
        say "munge: reusing the running munged at $DEFAULT_MUNGE_SOCKET"
        return
    fi
    # Its own folder under /tmp, not in STATE_DIR: munged runs as the munge user, which cannot reach a
    # folder inside one only root may enter (a notebook's or a test's working folder).
    dir=$(mktemp -d /tmp/mgtutor-munge.XXXXXX)
    echo "$dir" >"$state/munge.dir"
    local key=/etc/munge/munge.key
    if [[ ! -r $key ]]; then
        # No system key: make one of our own, readable only by the munge user (munged checks that).
        key=$dir/munge.key
        [[ -f $key ]] || dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
        chmod 600 "$key"
    fi
    local user=root
    if id munge >/dev/null 2>&1; then user=munge; fi
    chown -R "$user" "$dir"
    [[ $key == "$dir/munge.key" ]] && chown "$user" "$key"
    chmod 755 "$dir"  # munged refuses a socket directory others may write to
    # runuser: munged drops nothing itself; as the munge user it can read only munge's key.
    runuser -u "$user" -- munged --key-file="$key" --socket="$dir/munge.socket" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        || die "munged did not start; see $dir/munged.log"
    local i
    for i in $(seq 50); do munge_works "$dir/munge.socket" && break; sleep 0.1; done
    munge_works "$dir/munge.socket" || die "munged started but does not answer; see $dir/munged.log"
    echo "$dir/munge.socket" >"$state/munge.socket-path"
    cp "$dir/munged.pid" "$state/munged.started-by-us"
    say "munge: started munged (pid $(cat "$dir/munged.pid")), socket $dir/munge.socket"
}

# ---------------------------------------------------------------- network
make_network() {
    local node ns veth
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        # `ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts for what it runs: every
        # process of a node (slurmd, its job steps) resolves node1/node2 to the veth addresses.
        mkdir -p "/etc/netns/$ns"
        {
            echo "127.0.0.1 localhost"
            echo "::1 localhost ip6-localhost ip6-loopback"
            local other
            for other in "${NODES[@]}"; do echo "$(node_ip "$other") $other"; done
        } >"/etc/netns/$ns/hosts"
    done
    # One veth pair, created directly with its two ends in the two namespaces: it never exists in
    # the host's namespace, and no route leads there.
    ip link add "$(veth_of node1)" netns "$(netns_of node1)" type veth \
        peer name "$(veth_of node2)" netns "$(netns_of node2)"
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node"); veth=$(veth_of "$node")
        ip -n "$ns" addr add "$(node_ip "$node")/24" dev "$veth"
        ip -n "$ns" link set "$veth" up
    done
    # (No ping check: ping may not be installed; slurmd registering with slurmctld across the pair
    # is the test that the link works.)
}

# ---------------------------------------------------------------- slurm
write_conf() {
    local state=$1 socket
    socket=$(cat "$state/munge.socket-path")
    local node
    # The spools hold unix sockets, whose paths may not exceed 108 bytes: a short folder of their own,
    # not STATE_DIR (a test's or a notebook's working folder can be long). One cluster at a time.
    rm -rf "$SPOOL"
    for node in "${NODES[@]}"; do mkdir -p "$state/$node" "$SPOOL/$node"; done
    mkdir -p "$state/ctld"
    cat >"$state/slurm.conf" <<EOF
# Written by cluster/slurm/local_cluster.sh up; removed by down. Two namespaces on one machine.
ClusterName=mgtutor
SlurmctldHost=node1($(node_ip node1))
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# Root runs everything: the lessons' jobs run as whoever submits them from the head node (root).
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
# No cgroups in a classroom VM or container: processes are tracked through /proc.
ProctrackType=proctrack/linuxproc
# task/none: a step keeps the CPU mask its slurmd was started with (taskset), one core per node.
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# A node that went down (its slurmd killed) comes back when it registers again, and a job whose
# node failed is requeued: the lesson on failures relies on both.
ReturnToService=2
JobRequeue=1
# Kill a job step quickly when one of its tasks dies (srun --kill-on-bad-exit does the rest).
KillWait=5
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
StateSaveLocation=$state/ctld
SlurmctldPidFile=$state/ctld/slurmctld.pid
SlurmctldLogFile=$state/ctld/slurmctld.log
# %n: each slurmd (slurmd -N nodeN) keeps its own spool, pid file and log.
SlurmdSpoolDir=$SPOOL/%n
SlurmdPidFile=$state/%n/slurmd.pid
SlurmdLogFile=$state/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=node1 NodeAddr=$(node_ip node1) NodeHostname=node1 CPUs=1 State=UNKNOWN
NodeName=node2 NodeAddr=$(node_ip node2) NodeHostname=node2 CPUs=1 State=UNKNOWN
PartitionName=main Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
}

# Runs "$@" inside a node: its network namespace, a new UTS namespace whose hostname is the node's
# name (so `hostname` and socket.gethostname() say node1 or node2), and a new mount namespace where
# /etc/netns/<ns>/hosts is bind-mounted over /etc/hosts (what `ip netns exec` does).
# Why not `ip netns exec` itself: it also mounts a fresh /sys, which hides /sys/fs/cgroup, and
# slurmd 22.05 initializes its cgroup plugin even with proctrack/linuxproc and task/none; without
# /sys/fs/cgroup it stops with "Unable to initialize cgroup plugin". nsenter keeps the host's /sys.
in_node() {
    local node=$1 ns; shift
    ns=$(netns_of "$node")
    # shellcheck disable=SC2016
    nsenter --net="/run/netns/$ns" unshare --mount --uts --propagation private \
        sh -c 'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$0" && shift && exec "$@"' \
        "$node" "$ns" "$@"
}

start_slurm() {
    local state=$1 node cpu=0 i
    export SLURM_CONF=$state/slurm.conf
    in_node node1 slurmctld -f "$SLURM_CONF" -c  # -c: a clean start, no job of an earlier cluster
    for node in "${NODES[@]}"; do
        # taskset: this slurmd, its slurmstepds and every task they start run on one core only.
        in_node "$node" taskset -c "$cpu" slurmd -N "$node" -f "$SLURM_CONF"
        cpu=$((cpu + 1))
    done
    for i in $(seq 60); do
        if [[ $(head_exec sinfo -h -o '%t' -N "$state" 2>/dev/null | sort -u | tr -d '\n') == idle ]] \
            && [[ $(head_exec sinfo -h -N -o '%N' "$state" 2>/dev/null | wc -l) -eq 2 ]]; then
            return 0
        fi
        sleep 1
    done
    head_exec sinfo -N "$state" >&2 || true
    die "the nodes did not become idle in 60 s; see $state/ctld/slurmctld.log and $state/node*/slurmd.log"
}

# head_exec CMD... STATE: CMD on node1 with SLURM_CONF set (the last argument is the state dir).
head_exec() {
    local state=${*: -1} argv=("${@:1:$#-1}")
    ip netns exec "$(netns_of node1)" env SLURM_CONF="$state/slurm.conf" "${argv[@]}"
}

# ---------------------------------------------------------------- commands
# What `up` checks before it changes anything; alone (`check`), it says whether `up` would start.
cmd_check() {
    need_root up
    check_tools
    if ip netns list | grep -q "^$(netns_of node1)\b"; then
        local why
        if why=$(stale_because); then
            say "check: a dead cluster is left over ($why); up takes it down first"
        else
            die "a cluster is already up (netns $(netns_of node1) exists): run '$0 down' first"
        fi
    fi
}

# Why the cluster that is up is dead (printed, status 0), or status 1 if it may be in use. A run that
# was killed (a kernel, a test session, a machine's session ending) leaves its namespaces behind, and
# the names are fixed: without this, every later `up` on the machine would refuse.
# A running process's start time (which tells a reused pid from its owner), nothing for one that has
# ended: gone, or a zombie, which is all a killed daemon stays where nothing reaps it (PID 1 here).
started_at() { awk '$3 != "Z" {print $22}' "/proc/$1/stat" 2>/dev/null || true; }
stale_because() {
    local state pid start file node alive=0
    state=$(up_state)
    if [[ -f $OWNER_FILE ]]; then
        read -r pid start <"$OWNER_FILE" || true
        if [[ -z ${start:-} || $(started_at "$pid") != "$start" ]]; then  # no start: gone by `up`'s end
            echo "the process that brought it up, pid $pid, has ended"; return 0
        fi
        return 1  # its owner lives: in use
    fi
    for file in "$state/ctld/slurmctld.pid" "$state"/node*/slurmd.pid; do
        [[ -f $file && -n $(started_at "$(cat "$file")") ]] && alive=1
    done
    for node in "${NODES[@]}"; do
        [[ -n $(ip netns pids "$(netns_of "$node")" 2>/dev/null) ]] && alive=1
    done
    ((alive == 0)) || return 1
    echo "no Slurm daemon and no process left in its namespaces"
}

cmd_up() {
    cmd_check
    local state why
    if ip netns list | grep -q "^$(netns_of node1)\b" && why=$(stale_because); then
        cmd_down "$(up_state)"
    fi
    state=$(state_dir "${1:-}")
    mkdir -p "$state"
    echo "$state" >"$CURRENT_FILE"
    # Whatever fails from here on (a command under set -e, or die), `down` cleans up: every step
    # records what it made, and down is safe on a half-built cluster.
    UP_STATE=$state
    trap 'if [[ -n ${UP_STATE:-} ]]; then echo "local_cluster: up failed; cleaning up with down" >&2; cmd_down "$UP_STATE" >&2; fi' EXIT
    start_munge "$state"
    make_network
    write_conf "$state"
    start_slurm "$state"
    # A program that brings the cluster up for its own run names itself (its pid): if it dies without
    # `down`, the next `up` knows the cluster is dead. A cluster brought up by hand has no owner.
    if [[ ${MGTUTOR_CLUSTER_OWNER:-} =~ ^[0-9]+$ ]]; then
        echo "$MGTUTOR_CLUSTER_OWNER $(started_at "$MGTUTOR_CLUSTER_OWNER")" >"$OWNER_FILE"
    fi
    UP_STATE=
    say "up: nodes node1=$(node_ip node1) (CPU 0, head: slurmctld :$CTLD_PORT) node2=$(node_ip node2) (CPU 1), both idle; SLURM_CONF=$state/slurm.conf; clients: $0 exec sinfo"
}

kill_pidfile() {  # kill_pidfile FILE...: SIGTERM each pid in the FILEs, all at once; SIGKILL after 5 s
    local file pid i pids=()
    for file in "$@"; do
        [[ -f $file ]] && pid=$(cat "$file") && [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null && pids+=("$pid")
    done
    for i in $(seq 50); do
        local alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        ((${#alive[@]} == 0)) && return 0
        pids=("${alive[@]}")
        sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}

cmd_down() {
    need_root down
    local state node ns pids
    state=$(state_dir "${1:-$(current_state)}")
    local daemons=("$state/ctld/slurmctld.pid")
    for node in "${NODES[@]}"; do daemons+=("$state/$node/slurmd.pid"); done
    kill_pidfile "${daemons[@]}"
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node")
        if ip netns list | grep -q "^$ns\b"; then
            # Whatever still lives in a node's namespace (job steps, training workers) is the
            # cluster's: nothing else can be there, since this script made the namespace.
            pids=$(ip netns pids "$ns" || true)
            [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
            ip netns del "$ns" || true  # its veth end goes with it, and so the pair
        fi
        rm -rf "/etc/netns/$ns"
    done
    if [[ -f $state/munged.started-by-us ]]; then
        kill_pidfile "$state/munged.started-by-us"
        rm -f "$state/munged.started-by-us"
    fi
    if [[ -f $state/munge.dir ]]; then
        rm -rf "$(cat "$state/munge.dir")" "$state/munge.dir"
    fi
    rm -rf "$state/slurm.conf" "$CURRENT_FILE" "$SPOOL" "$OWNER_FILE"
    say "down: no mgt-node namespaces, no cluster daemons left ($state kept for its logs)"
}

cmd_status() {
    local state node ns
    state=$(current_state)
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node")
        if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
            echo "$node: netns $ns, $(node_ip "$node"), processes: $(ip netns pids "$ns" 2>/dev/null | wc -l)"
        else
            echo "$node: down (no netns $ns)"
        fi
    done
    if [[ -f $state/slurm.conf ]] && ip netns list 2>/dev/null | grep -q "^$(netns_of node1)\b"; then
        head_exec sinfo -N "$state" || true
        head_exec squeue "$state" || true
    fi
}

cmd_exec() {
    need_root exec
    (($# > 0)) || die "exec: say what to run, e.g. $0 exec sinfo" 2
    local state
    state=$(current_state)
    [[ -f $state/slurm.conf ]] || die "no cluster is up (no $state/slurm.conf): run '$0 up'"
    exec ip netns exec "$(netns_of node1)" env SLURM_CONF="$state/slurm.conf" "$@"
}

# tbf needs a bucket at least as large as one packet the veth hands it; with segmentation offload
# that is up to 64 KB, and at high rates the bucket must also cover one kernel tick of traffic.
burst_for() {
    local rate=$1 number unit bits
    [[ $rate =~ ^([0-9]+)(kbit|mbit|gbit|bit)$ ]] || die "shape: RATE like 10gbit, 1gbit, 100mbit (got '$rate')" 2
    number=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
    case $unit in bit) bits=$number ;; kbit) bits=$((number * 1000)) ;;
        mbit) bits=$((number * 1000000)) ;; gbit) bits=$((number * 1000000000)) ;; esac
    local burst=$((bits / 8 / 250))  # 4 ms of traffic
    ((burst >= 131072)) || burst=131072
    echo "$burst"
}

cmd_shape() {
    need_root shape
    local rate=${1:-} node ns veth burst
    [[ -n $rate ]] || die "shape: say a RATE (10gbit, 1gbit, 100mbit) or off" 2
    command -v tc >/dev/null || die "shape: tc is not installed (apt install iproute2)" 3
    [[ $rate == off ]] || burst=$(burst_for "$rate")
    for node in "${NODES[@]}"; do
        ns=$(netns_of "$node"); veth=$(veth_of "$node")
        ip netns list | grep -q "^$ns\b" || die "shape: no cluster is up (no netns $ns)"
        if [[ $rate == off ]]; then
            ip netns exec "$ns" tc qdisc del dev "$veth" root 2>/dev/null || true
        else
            # Both ends: an all-reduce sends both ways, each direction leaves through its own end.
            ip netns exec "$ns" tc qdisc replace dev "$veth" root tbf rate "$rate" burst "$burst" latency 100ms \
                || die "shape: this kernel has no tbf qdisc (sch_tbf), so the link cannot be shaped" 3
        fi
    done
    if [[ $rate == off ]]; then say "shape: off (the veth runs at memory speed)"; else say "shape: $rate each way"; fi
}

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

main() {
    local command=${1:-}
    (($# > 0)) && shift
    case $command in
        up) cmd_up "$@" ;;
        check) cmd_check && say "check: a cluster can be made here" ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        exec) cmd_exec "$@" ;;
        shape) cmd_shape "$@" ;;
        *) usage ;;
    esac
}

main "$@"
