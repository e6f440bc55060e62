#!/usr/bin/env bash
# Local bring-up of the services the pipeline runs against, all on loopback:
#   a Prefect server (SQLite), a Prefect process worker, an MLflow tracking
#   server (SQLite + local artifact store).
#
#   bash infra/local.sh up        start what is not running (idempotent)
#   bash infra/local.sh deploy    register deployments/prefect.yaml
#   bash infra/local.sh demo      up + deploy + run pretrain/full on configs/tiny.yaml and watch it
#   bash infra/local.sh demo-rollback   the same with a loss spike injected: rollback and skip-ahead to watch
#   bash infra/local.sh demo-decay      configs/tiny-decay.yaml (a decay with its own mix), then a decay branch
#   bash infra/local.sh status    what is running
#   bash infra/local.sh down      stop everything `up` started
#
# State lives in $PRETRAIN_STATE (default: <project>/.local). Ports:
# PREFECT_PORT (4200), MLFLOW_PORT (5000). Python: $VENV (default: <project>/.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${PRETRAIN_STATE:-$ROOT/.local}"
VENV="${VENV:-$ROOT/.venv}"
PREFECT_PORT="${PREFECT_PORT:-4200}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
POOL="${PRETRAIN_WORK_POOL:-local}"
GPU_POOL="${PRETRAIN_GPU_WORK_POOL:-$POOL}"
# eval gets a pool of its own: a scheduled or checkpoint-triggered eval never waits behind, or lands beside, training
EVAL_POOL="${PRETRAIN_EVAL_WORK_POOL:-$GPU_POOL-eval}"
BIN="$VENV/bin"

export PREFECT_HOME="$STATE/prefect"
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_SERVER_API_HOST=127.0.0.1
export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
export PRETRAIN_HOME="$ROOT"
export PRETRAIN_WORK_POOL="$POOL"
export PRETRAIN_GPU_WORK_POOL="$GPU_POOL"
export PRETRAIN_EVAL_WORK_POOL="$EVAL_POOL"
export PRETRAIN_CONFIG="${PRETRAIN_CONFIG:-configs/tiny.yaml}"
# persisted flow results (what a retried run reuses); on a cluster put this on shared storage
export PREFECT_LOCAL_STORAGE_PATH="${PREFECT_LOCAL_STORAGE_PATH:-$STATE/prefect/storage}"
mkdir -p "$STATE/logs" "$STATE/pids" "$PREFECT_HOME" "$STATE/mlflow/artifacts"

alive() { [[ -f "$STATE/pids/$1" ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

wait_http() { # url seconds name
  for _ in $(seq "$2"); do
    # a server that exited (a port taken since the check, a bad database) is not waited for
    alive "$3" || break
    if "$BIN/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; then return 0; fi
    sleep 1
  done
  if alive "$3"; then echo "error: $3 did not answer at $1 within $2 s; see $STATE/logs/$3.log" >&2
  else echo "error: $3 exited before it answered at $1; its log, $STATE/logs/$3.log, ends:" >&2; fi
  tail -20 "$STATE/logs/$3.log" >&2 || true
  return 1
}

# another checkout's server on our port would answer for ours, and its worker run our flows with its code
free_port() { # name port
  "$BIN/python" "$ROOT/infra/service_conflicts.py" port "$1" "$2" "$STATE/pids/$1" || exit 1
}

ensure_pool() { # name
  "$BIN/prefect" work-pool inspect "$1" >/dev/null 2>&1 && return 0
  local out
  out="$("$BIN/prefect" work-pool create "$1" --type process 2>&1)" && return 0
  # a worker that reached the server first creates its pool itself
  "$BIN/prefect" work-pool inspect "$1" >/dev/null 2>&1 && return 0
  echo "error: could not create work pool $1 on $PREFECT_API_URL:" >&2
  echo "$out" >&2
  exit 1
}

no_foreign_workers() {
  "$BIN/python" "$ROOT/infra/service_conflicts.py" workers "$PREFECT_API_URL" "$STATE"/pids/prefect-*worker || exit 1
}

start() { # name command...
  local name="$1"; shift
  if alive "$name"; then echo "$name: already running (pid $(cat "$STATE/pids/$name"))"; return 0; fi
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
  echo "$name: started (pid $!), log $STATE/logs/$name.log"
}

up() {
  [[ -x "$BIN/prefect" ]] || { echo "error: $BIN/prefect not found; run 'make install' first" >&2; exit 1; }
  free_port prefect-server "$PREFECT_PORT"
  free_port mlflow-server "$MLFLOW_PORT"
  no_foreign_workers
  start prefect-server "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT"
  start mlflow-server "$BIN/mlflow" server --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
    --backend-store-uri "sqlite:///$STATE/mlflow/mlflow.db" \
    --artifacts-destination "$STATE/mlflow/artifacts"
  wait_http "http://127.0.0.1:$PREFECT_PORT/api/health" 120 prefect-server
  wait_http "http://127.0.0.1:$MLFLOW_PORT/health" 120 mlflow-server
  ensure_pool "$POOL"
  start prefect-worker "$BIN/prefect" worker start --pool "$POOL" --type process
  if [[ "$GPU_POOL" != "$POOL" ]]; then
    ensure_pool "$GPU_POOL"
    start prefect-gpu-worker "$BIN/prefect" worker start --pool "$GPU_POOL" --type process
  fi
  ensure_pool "$EVAL_POOL"
  start prefect-eval-worker "$BIN/prefect" worker start --pool "$EVAL_POOL" --type process
}

deploy() {
  (cd "$ROOT" && "$BIN/prefect" --no-prompt deploy --all --prefect-file deployments/prefect.yaml)
}

status() {
  for name in prefect-server mlflow-server prefect-worker prefect-gpu-worker prefect-eval-worker; do
    if alive "$name"; then echo "$name: running (pid $(cat "$STATE/pids/$name"))"; else echo "$name: stopped"; fi
  done
}

stop_together() { # names: TERM them all, wait up to 10 s for all of them at once, then KILL what is left
  local name pid names=() pids=()
  for name in "$@"; do
    if alive "$name"; then
      pid="$(cat "$STATE/pids/$name")"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      names+=("$name") pids+=("$pid")
    fi
    rm -f "$STATE/pids/$name"
  done
  for _ in $(seq 20); do
    local running=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    (( running )) || break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  for name in "${names[@]}"; do echo "$name: stopped"; done
}

down() {
  # workers first, so that none of them is left polling a server that is gone; one wait for each group
  stop_together prefect-eval-worker prefect-gpu-worker prefect-worker
  stop_together mlflow-server prefect-server
}

demo() {
  up
  deploy
  local config="${1:-configs/tiny.yaml}" out="$STATE/logs/demo-run.log" extra=()
  # DEMO_ENV: a JSON object of environment variables for the flow run (demo-rollback injects a loss spike)
  [[ -n "${DEMO_ENV:-}" ]] && extra=(--job-variable "env=$DEMO_ENV")
  set +e
  "$BIN/prefect" deployment run pretrain/full -p config="$config" "${extra[@]}" --watch 2>&1 | tee "$out"
  local status=${PIPESTATUS[0]}
  set -e
  local run_id run_root exp_id
  run_id="$(grep -oE 'UUID: [0-9a-f-]{36}' "$out" | head -1 | cut -d' ' -f2)"
  run_root="$(cd "$ROOT" && "$BIN/python" -c "import sys; from pretrain.config import load_config; print(load_config(sys.argv[1]).run_root_path())" "$config")"
  exp_id="$("$BIN/python" -c "from mlflow.tracking import MlflowClient; e = MlflowClient().get_experiment_by_name('pretrain'); print(e.experiment_id if e else '')" 2>/dev/null || true)"
  cat <<MSG

Demo $([[ $status == 0 ]] && echo finished || echo "FAILED (exit $status)").
  Prefect UI : http://127.0.0.1:$PREFECT_PORT/runs/flow-run/$run_id   (sub-flows, logs from every rank, artifacts)
  MLflow UI  : http://127.0.0.1:$MLFLOW_PORT/#/experiments/$exp_id/runs   (one parent run per pipeline run, a child per stage)
  Run root   : $run_root
Stop the services with: make stop
MSG
  return "$status"
}

case "${1:-}" in
  up) up ;;
  deploy) deploy ;;
  demo) shift; demo "$@" ;;
  # the spike hits the samples of step 121 (8 a step: 2 ranks x 4); see configs/tiny-rollback.yaml
  demo-rollback) DEMO_ENV='{"PRETRAIN_SPIKE_POSITIONS": "960-968"}' demo configs/tiny-rollback.yaml
                 echo "Rollback: the train sub-flow's 'rollback' and 'skip-ahead' sub-flows and their artifacts in Prefect;"
                 echo "          loss.png and recovery.jsonl in the MLflow run tiny-rollback/train" ;;
  # the WSD decay phase: a run whose decay draws another mix, then a decay branch from its middle checkpoint
  demo-decay) demo configs/tiny-decay.yaml
              "$BIN/prefect" deployment run anneal/default -p config=configs/tiny-decay.yaml \
                -p from_checkpoint=step_00000100 -p tokens=40960 -p mix=zh=0.2,en=0.6,code=0.2 -p name=mid-en --watch
              echo "Decay: MLflow runs tiny-decay/train (tokens/stable/* and tokens/decay/* change at step 140, the"
              echo "       eval flow's ckpt_eval_ppl_* and ckpt_task/* per checkpoint) and tiny-decay/anneal/mid-en (the"
              echo "       branch from step 100, the same eval metrics at its last step): select both, Compare" ;;
  status) status ;;
  down) down ;;
  *) echo "usage: $0 up|deploy|demo [config]|demo-rollback|demo-decay|status|down" >&2; exit 2 ;;
esac
