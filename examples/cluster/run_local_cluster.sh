#!/usr/bin/env bash
# Train on a Ray cluster the way you would on a real one, with the cluster on
# this machine: start a head node on loopback, submit `rlinks learner` with
# `ray job submit`, connect simulators from outside the cluster, wait for the
# job to end SUCCEEDED, and stop the cluster this script started (and no other).
#
#   examples/cluster/run_local_cluster.sh
#
# Settings (environment): CONFIG (configs/ppo_cartpole.yaml), STOP_REWARD (150),
# STOP_ITERS (40), CLIENTS_PER_RUNNER (2), JOB_TIMEOUT_S (300).
# Needs `ray job submit`, i.e. `pip install 'ray[default]'` (the dashboard's job server).
# docs/CLUSTER.md ("Running on a cluster") explains each step and the Ray gotchas it works around.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# The job runs with the PATH of the `ray start` that made the cluster, so the
# venv's `rlinks` must be on PATH here, before the cluster starts.
if [[ -x .venv/bin/ray ]]; then PATH="$ROOT/.venv/bin:$PATH"; fi
for tool in ray rlinks python; do
    command -v "$tool" >/dev/null || { echo "run_local_cluster: '$tool' not found; install with: pip install -e . 'ray[default]'" >&2; exit 1; }
done

CONFIG="${CONFIG:-configs/ppo_cartpole.yaml}"
STOP_REWARD="${STOP_REWARD:-150}"
STOP_ITERS="${STOP_ITERS:-40}"
CLIENTS_PER_RUNNER="${CLIENTS_PER_RUNNER:-2}"
JOB_TIMEOUT_S="${JOB_TIMEOUT_S:-300}"

# Ray's temp dir must be short: its Unix socket paths live under it (108-byte limit).
WORK="$(mktemp -d /tmp/rlinks-cluster.XXXXXX)"
OUTPUT="$WORK/output"
JOB_ID="rlinks-learner-$(date +%s)"

# Everything `ray` does in this shell talks to this cluster only. Token
# authentication on, with this cluster's own token: the `ray` CLI sends the
# token only when RAY_AUTH_MODE=token is set on its side too.
unset RAY_ADDRESS RAY_API_SERVER_ADDRESS RAY_AUTH_TOKEN
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="$WORK/auth_token"
(umask 077 && python -c 'import secrets; print(secrets.token_hex(32))' >"$RAY_AUTH_TOKEN_PATH")

# Explicit free loopback ports for every server the head starts, so this
# cluster collides with no other Ray on the machine (nor with its defaults).
read -r GCS_PORT DASHBOARD_PORT NODE_MANAGER_PORT OBJECT_MANAGER_PORT AGENT_HTTP_PORT AGENT_GRPC_PORT \
    RUNTIME_ENV_AGENT_PORT METRICS_PORT CLIENT_SERVER_PORT < <(python - <<'EOF'
import socket
socks = [socket.socket() for _ in range(9)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)
DASHBOARD="http://127.0.0.1:$DASHBOARD_PORT"

HEAD_PID=""
LOGS_PID=""
CLIENT_PIDS=()

descendants() {  # every process below $1, depth first
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

cleanup() {
    local code=$?
    trap - EXIT INT TERM
    # `rlinks client` passes a SIGTERM on to none of its copies: end them first.
    for pid in "${CLIENT_PIDS[@]}" $LOGS_PID; do
        for child in $(descendants "$pid"); do kill "$child" 2>/dev/null || true; done
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n "$HEAD_PID" ]] && kill -0 "$HEAD_PID" 2>/dev/null; then
        echo "== stopping the cluster (head pid $HEAD_PID) =="
        # Not `ray stop`: that ends every Ray process on the machine. SIGTERM to
        # `ray start --block` stops its node's processes; whatever outlives it
        # (a worker, the job's driver) is killed by pid below.
        local procs
        procs="$(descendants "$HEAD_PID")"
        kill -TERM "$HEAD_PID"
        for _ in $(seq 1 60); do kill -0 "$HEAD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$HEAD_PID" 2>/dev/null || true
        sleep 2
        for pid in $procs; do kill -KILL "$pid" 2>/dev/null || true; done
        if pgrep -f -- "$WORK/" >/dev/null; then
            echo "run_local_cluster: processes of this cluster still running:" >&2
            pgrep -af -- "$WORK/" >&2
            code=1
        fi
    fi
    echo "results and logs: $WORK (rm -rf it when done)"
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== 1. head node on 127.0.0.1:$GCS_PORT, dashboard and job server at $DASHBOARD =="
# RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S: on SIGTERM, Ray drains a busy node for up to 30 s first.
RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=5 ray start --head --block --disable-usage-stats \
    --node-ip-address 127.0.0.1 --port "$GCS_PORT" --num-cpus 4 --temp-dir "$WORK" \
    --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$DASHBOARD_PORT" \
    --node-manager-port "$NODE_MANAGER_PORT" --object-manager-port "$OBJECT_MANAGER_PORT" \
    --dashboard-agent-listen-port "$AGENT_HTTP_PORT" --dashboard-agent-grpc-port "$AGENT_GRPC_PORT" \
    --runtime-env-agent-port "$RUNTIME_ENV_AGENT_PORT" --metrics-export-port "$METRICS_PORT" \
    --ray-client-server-port "$CLIENT_SERVER_PORT" \
    >"$WORK/head.log" 2>&1 &
HEAD_PID=$!
for attempt in $(seq 1 60); do
    if ray job list --address "$DASHBOARD" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$HEAD_PID" 2>/dev/null || [[ $attempt == 60 ]]; then
        echo "run_local_cluster: the head node did not come up; see $WORK/head.log" >&2
        tail -n 20 "$WORK/head.log" >&2
        exit 1
    fi
    sleep 2
done

echo "== 2. submit the learner as job $JOB_ID =="
# --working-dir . uploads this checkout (minus what .gitignore lists: .venv,
# runs/) and runs the entrypoint in it. --output must be absolute: a relative
# one would land in the job's copy under $WORK/session_*/runtime_resources.
# The job server may answer before the node's agent is up ("No available
# agent to submit job"): then submit again.
for attempt in 1 2 3; do
    if submitted="$(ray job submit --address "$DASHBOARD" --submission-id "$JOB_ID" --working-dir . --no-wait -- \
            rlinks learner --config "$CONFIG" --port 0 \
            --stop-reward "$STOP_REWARD" --stop-iters "$STOP_ITERS" --output "$OUTPUT" 2>&1)"; then
        break
    fi
    if [[ $attempt == 3 ]] || ! grep -q "No available agent" <<<"$submitted"; then
        echo "$submitted" >&2
        exit 1
    fi
    sleep 5
done
# Show the job's output as it comes.
ray job logs --address "$DASHBOARD" --follow "$JOB_ID" &
LOGS_PID=$!

job_state() {  # SUCCEEDED, FAILED, STOPPED, or RUNNING while it isn't over
    local said
    said="$(ray job status --address "$DASHBOARD" --log-style record "$JOB_ID" 2>&1)" || true
    case "$said" in
        *"Job '$JOB_ID' succeeded"*) echo SUCCEEDED ;;
        *"Job '$JOB_ID' failed"*) echo FAILED ;;
        *"Job '$JOB_ID' was stopped"*) echo STOPPED ;;
        *) echo RUNNING ;;
    esac
}

deadline=$((SECONDS + JOB_TIMEOUT_S))
# The learner writes directory.json (the one address for simulators) once its runners listen.
until [[ -s "$OUTPUT/directory.json" ]]; do
    sleep 2
    if [[ "$(job_state)" != RUNNING ]] || ((SECONDS > deadline)); then
        echo "run_local_cluster: the learner never listed its runners; see: ray job logs $JOB_ID" >&2
        exit 1
    fi
done

echo "== 3. simulators, outside the cluster, given the one address: the learner's directory =="
DIRECTORY="$(python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["host"] + ":" + str(d["port"]))' \
    "$OUTPUT/directory.json")"
rlinks endpoints "$DIRECTORY"    # what the directory lists: runner 1: 127.0.0.1:PORT (N clients), ...
RUNNERS="$(rlinks endpoints "$DIRECTORY" | grep -c '^runner ')"
# Each simulator asks the directory, goes to the least-loaded runner, and asks again if that runner goes away.
rlinks client --address "$DIRECTORY" -n $((CLIENTS_PER_RUNNER * RUNNERS)) &
CLIENT_PIDS+=($!)

echo "== 4. wait for the job to end =="
while state="$(job_state)" && [[ "$state" == RUNNING ]]; do
    if ((SECONDS > deadline)); then
        echo "run_local_cluster: job $JOB_ID still running after ${JOB_TIMEOUT_S}s; stopping it" >&2
        ray job stop --address "$DASHBOARD" "$JOB_ID" >/dev/null 2>&1 || true
        exit 1
    fi
    sleep 3
done
# The learner's runners told every simulator it stopped; they end on their own.
clients_deadline=$((SECONDS + 60))
for pid in "${CLIENT_PIDS[@]}" $LOGS_PID; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < clients_deadline)); do sleep 1; done
done

if [[ "$state" != SUCCEEDED ]]; then
    echo "run_local_cluster: job $JOB_ID ended $state; see: ray job logs $JOB_ID" >&2
    exit 1
fi
echo "== job $JOB_ID SUCCEEDED; curve: $OUTPUT/learning_curve.png =="
