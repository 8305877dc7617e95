#!/usr/bin/env bash
# A real SLURM cluster of two CPU nodes on this one machine, from the distribution's packages: to try
# configs/slurm_ddp.sbatch before a real cluster, and for the test suite (.ci/run starts it before `make test`).
#
#   scripts/local_slurm.sh start     install (as root, with apt) and start it; quick when it runs already
#   scripts/local_slurm.sh stop      cancel its jobs and stop every daemon it started
#   scripts/local_slurm.sh status    the nodes and the queue
#   eval "$(scripts/local_slurm.sh env)"   point sbatch, squeue, scontrol, scancel at it (SLURM_CONF)
#
# Then, from the repository root (the nodes are this machine: they see the repository and its .venv):
#   sbatch --nodes=2 --ntasks-per-node=1 --gpus-per-node=0 --cpus-per-task=1 configs/slurm_ddp.sbatch \
#       --config configs/train_ddp.yaml --set training.num_epochs=2
#
# What runs: munged, slurmctld, and two slurmd (`slurmd -N n1`, `slurmd -N n2`) on their own ports; the node
# names n1 and n2 resolve to 127.0.0.1 (/etc/hosts). Every file of the cluster (config, munge key, spool,
# state, logs, pid files) is in one folder, QG_SLURM_DIR (default /tmp/quantumgrav-slurm); stop, then delete
# it, and nothing of the cluster is left but the packages and the /etc/hosts line.
# Settings (environment): QG_SLURM_DIR, QG_SLURM_PORT (slurmctld's; the nodes take the next two; default
# 31817, below Linux's ephemeral ports and above the rendezvous ports of slurm_ddp.sbatch), QG_SLURM_CPUS
# (CPUs of each node; default: this machine's, at least 4, so that the jobs of two test files can run side by
# side: the nodes share this machine's cores anyway).
# Needs: Debian/Ubuntu packages slurm-wlm and munge (installed with apt-get when run as root).
set -euo pipefail

DIR=${QG_SLURM_DIR:-/tmp/quantumgrav-slurm}
PORT=${QG_SLURM_PORT:-31817}
CPUS=${QG_SLURM_CPUS:-$(( $(nproc) > 4 ? $(nproc) : 4 ))}
NODES=(n1 n2)
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
PACKAGES=(slurm-wlm munge)

say() { echo "local_slurm: $*"; }
fail() { echo "local_slurm: $*" >&2; exit 1; }

running() {  # every daemon alive, the controller answers and both nodes take jobs
  [ -f "$CONF" ] || return 1
  local name
  for name in munged slurmctld "${NODES[@]/#/slurmd-}"; do
    pid_alive "$DIR/run/$name.pid" || return 1
  done
  scontrol ping >/dev/null 2>&1 || return 1
  # sinfo's short states: idle, mix, alloc (and "~"/"*" suffixes for powered-down/unresponsive)
  [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -cE ' (idle|mix|alloc|comp)$')" = "${#NODES[@]}" ]
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local missing=() package
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    fail "SLURM is not installed: install ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${PACKAGES[*]}), then run this again as root"
  fi
  say "installing ${missing[*]} with apt-get"
  # The packages' own services stay off (no slurm.conf in /etc/slurm): this cluster runs its own daemons.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$DIR/log/apt.log" 2>&1 || {
    apt-get update -q >>"$DIR/log/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$DIR/log/apt.log" 2>&1
  } || fail "apt-get could not install ${missing[*]}; see $DIR/log/apt.log"
}

resolve_node_names() {
  # slurm_ddp.sbatch rendezvouses on the first node *by name*, as on a real cluster: n1 and n2 must resolve.
  local name missing=()
  for name in "${NODES[@]}"; do
    [ "$(getent ahostsv4 "$name" 2>/dev/null | awk 'NR==1 {print $1}')" = 127.0.0.1 ] || missing+=("$name")
  done
  [ ${#missing[@]} = 0 ] && return 0
  [ -w /etc/hosts ] || fail "the node names ${missing[*]} must resolve to 127.0.0.1: add '127.0.0.1 ${missing[*]}' to /etc/hosts (as root)"
  echo "127.0.0.1 ${missing[*]}  # QuantumGrav's local SLURM cluster (scripts/local_slurm.sh)" >>/etc/hosts
}

write_config() {
  local host
  host=$(hostname -s)
  cat >"$CONF" <<EOF
# Written by scripts/local_slurm.sh on each start: two CPU nodes on this machine, all state under $DIR.
ClusterName=quantumgrav-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: the life of a job step's credential, and how long a requeued job waits before it may run
# again (default 120 s): launching a step on this machine takes well under a second.
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: processes are tracked through their parents, and no CPU binding (both nodes share these cores).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# Pending jobs are looked at every second (defaults: 60 s, backfill 30 s): a requeued job is not held a minute.
SchedulerParameters=sched_interval=1,bf_interval=1
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The nodes are declared, not probed: two "machines" share this one's cores.
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=${NODES[0]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=$CPUS State=UNKNOWN
NodeName=${NODES[1]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + 2)) CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP
EOF
}

start_daemon() {  # name, command...: start unless its pid file names a live process
  local name=$1
  shift
  pid_alive "$DIR/run/$name.pid" && return 0
  # stdin/stdout/stderr away from the caller: a test harness waiting for this script's output
  # must not wait for the daemons too; nor may they hold the lock of this script (fd 9).
  "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 9>&- || fail "$name did not start; see $DIR/log/$name.out and $DIR/log/"
}

start() {
  mkdir -p "$DIR"/{log,run,state,munge} "${NODES[@]/#/$DIR/spool/}"
  exec 9>"$DIR/lock"
  flock 9  # two test processes (pytest-xdist workers) may start it at once: the second waits, then finds it up
  if running; then
    say "running (SLURM_CONF=$CONF)"
    return 0
  fi
  install_packages
  resolve_node_names
  stop_daemons  # what is left of an earlier start (a daemon that died, a stale pid file)
  write_config
  [ -f "$DIR/munge/munge.key" ] || (umask 077; dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 2>/dev/null)
  chmod 700 "$DIR/munge"
  chmod 400 "$DIR/munge/munge.key"
  start_daemon munged munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
  # The state of an earlier start is kept, as on a real cluster: job ids go on increasing (a new job with the id
  # of an old one would continue that job's unfinished run: slurm_ddp.sbatch names runs by job id).
  # -i: a damaged state file is ignored rather than fatal.
  start_daemon slurmctld slurmctld -i -f "$CONF"
  local node
  for node in "${NODES[@]}"; do
    start_daemon "slurmd-$node" slurmd -N "$node" -f "$CONF"
  done
  local deadline=$((SECONDS + 60))
  until running; do
    [ $SECONDS -lt $deadline ] || fail "the nodes did not come up within 60 s: $(sinfo -N 2>&1 | tr '\n' ' '); see $DIR/log/"
    sleep 0.5
  done
  say "started: nodes ${NODES[*]} ($CPUS CPUs each), SLURM_CONF=$CONF"
}

stop_daemons() {
  local name pid_file pid
  for name in "${NODES[@]/#/slurmd-}" slurmctld munged; do
    pid_file=$DIR/run/$name.pid
    if pid_alive "$pid_file"; then
      pid=$(cat "$pid_file")
      kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$pid_file"
  done
}

stop() {
  [ -d "$DIR" ] || { say "not running (no $DIR)"; return 0; }
  exec 9>"$DIR/lock"
  flock 9
  if [ -f "$CONF" ] && scontrol ping >/dev/null 2>&1; then
    # A job's processes run under slurmstepd, which outlives slurmd: end the jobs first.
    local jobs=()
    mapfile -t jobs < <(squeue -h -o %A)
    if [ ${#jobs[@]} -gt 0 ]; then
      scancel "${jobs[@]}" 2>/dev/null || true
      local deadline=$((SECONDS + 60))
      while [ -n "$(squeue -h -o %A)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    fi
  fi
  stop_daemons
  say "stopped (its files are in $DIR)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    running || { say "not running"; exit 1; }
    sinfo -N -l
    squeue
    ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) fail "usage: $0 start|stop|status|env" ;;
esac
