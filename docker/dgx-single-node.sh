#!/usr/bin/env bash
# Ray on one DGX-like node (head only, all GPUs), then a raycolloc sweep on it.
#
#   docker/dgx-single-node.sh start            # start the Ray head (in the raycolloc container)
#   docker/dgx-single-node.sh sweep [ARGS...]  # run a sweep; ARGS replace the example overrides
#   docker/dgx-single-node.sh status           # `ray status`
#   docker/dgx-single-node.sh stop             # stop Ray and remove the container
#
# Environment:
#   IMAGE=raycolloc:latest        image built from docker/Dockerfile
#   CONTAINER=raycolloc-head      container name
#   DATA_DIR=/var/lib/raycolloc   host dir mounted at /data (results go to /data/results)
#   NUM_GPUS=<all>                GPUs Ray may use (default: every GPU nvidia-smi lists)
#   USE_DOCKER=1                  0: run Ray and raycolloc directly on the host instead
#                                 (raycolloc and ray[default] installed in the current Python)
#   MIG_RECONFIGURE=0             1: let raycolloc create MIG instances from the container
#                                 (adds --cap-add SYS_ADMIN and NVIDIA_MIG_CONFIG_DEVICES=all;
#                                 also pass mig.allow_reconfigure=true to the sweep)
#   PRIVILEGED=0                  1: --privileged (MIG devices created after the container
#                                 started are then usable; see docs/deployment.md)
#
# Not tested here: no Docker engine and no GPU on the machine where this script was written.
set -euo pipefail

IMAGE=${IMAGE:-raycolloc:latest}
CONTAINER=${CONTAINER:-raycolloc-head}
DATA_DIR=${DATA_DIR:-/var/lib/raycolloc}
USE_DOCKER=${USE_DOCKER:-1}
MIG_RECONFIGURE=${MIG_RECONFIGURE:-0}
PRIVILEGED=${PRIVILEGED:-0}
RAY_PORT=6379
DASHBOARD_PORT=8265
CLIENT_PORT=10001
METRICS_PORT=8080

# The study's uniform sweep. mode=mig needs MIG mode enabled by an administrator
# (nvidia-smi -i N -mig 1) on the GPUs, so it is left out of the example.
EXAMPLE_SWEEP=('degree=1,2,3,7' 'mode=naive,mps' 'workload=resnet26_cifar10')

die() { echo "dgx-single-node: $*" >&2; exit 1; }

num_gpus() {
  if [[ -n "${NUM_GPUS:-}" ]]; then
    echo "$NUM_GPUS"
  else
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found; set NUM_GPUS"
    nvidia-smi -L | grep -c '^GPU '
  fi
}

ray_start_args() {
  local gpus=$1
  echo "--head --port=${RAY_PORT} --ray-client-server-port=${CLIENT_PORT}" \
       "--dashboard-host=0.0.0.0 --dashboard-port=${DASHBOARD_PORT}" \
       "--metrics-export-port=${METRICS_PORT} --num-gpus=${gpus}"
}

# Run a command where Ray runs: in the container, or on the host.
in_ray() {
  if [[ "$USE_DOCKER" == 1 ]]; then
    docker exec -i "$CONTAINER" "$@"
  else
    "$@"
  fi
}

wait_for_ray() {
  local _
  for _ in $(seq 1 60); do
    if in_ray ray status >/dev/null 2>&1; then
      return 0
    fi
    sleep 2
  done
  die "Ray did not come up within 120 s (docker logs $CONTAINER, or /tmp/ray/session_latest/logs)"
}

start() {
  local gpus
  gpus=$(num_gpus)
  [[ "$gpus" -ge 1 ]] || die "no GPU found"
  mkdir -p "$DATA_DIR" /tmp/ray
  if [[ "$USE_DOCKER" == 1 ]]; then
    command -v docker >/dev/null || die "docker not found (or use USE_DOCKER=0)"
    if docker container inspect "$CONTAINER" >/dev/null 2>&1; then
      die "container $CONTAINER exists already; run '$0 stop' first"
    fi
    local opts=(
      --detach --name "$CONTAINER"
      --gpus all --net=host --ipc=host --pid=host
      --ulimit nofile=65536:65536 --ulimit memlock=-1
      -v "$DATA_DIR":/data
      -v /tmp/ray:/tmp/ray
      -e RAY_GRAFANA_HOST=http://127.0.0.1:3000
      -e RAY_PROMETHEUS_HOST=http://127.0.0.1:9090
    )
    if [[ "$MIG_RECONFIGURE" == 1 ]]; then
      opts+=(--cap-add SYS_ADMIN -e NVIDIA_MIG_CONFIG_DEVICES=all -e NVIDIA_MIG_MONITOR_DEVICES=all)
    fi
    if [[ "$PRIVILEGED" == 1 ]]; then
      opts+=(--privileged)
    fi
    # shellcheck disable=SC2046  # word splitting of the ray start arguments is intended
    docker run "${opts[@]}" "$IMAGE" ray start $(ray_start_args "$gpus") --block
  else
    command -v ray >/dev/null || die "ray not found on the host (pip install 'ray[default]' and raycolloc)"
    # shellcheck disable=SC2046
    RAY_GRAFANA_HOST=http://127.0.0.1:3000 RAY_PROMETHEUS_HOST=http://127.0.0.1:9090 \
      ray start $(ray_start_args "$gpus")
  fi
  wait_for_ray
  echo "Ray head is up with $gpus GPUs."
  echo "  dashboard:   http://$(hostname -f 2>/dev/null || hostname):${DASHBOARD_PORT}"
  echo "  metrics:     http://127.0.0.1:${METRICS_PORT}/metrics (Prometheus: docker/compose.monitoring.yaml)"
  echo "  next:        $0 sweep"
}

sweep() {
  local overrides=("$@")
  if [[ ${#overrides[@]} -eq 0 ]]; then
    overrides=("${EXAMPLE_SWEEP[@]}")
  fi
  local out_dir=/data/results
  [[ "$USE_DOCKER" == 1 ]] || out_dir="$DATA_DIR/results"
  # cluster.address=auto: join the running head instead of starting a private Ray instance.
  echo "+ python -m raycolloc.sweep -m ${overrides[*]} cluster.address=auto out_dir=$out_dir"
  in_ray python -m raycolloc.sweep -m "${overrides[@]}" cluster.address=auto out_dir="$out_dir"
}

status() {
  in_ray ray status
}

stop() {
  if [[ "$USE_DOCKER" == 1 ]]; then
    if docker container inspect "$CONTAINER" >/dev/null 2>&1; then
      # --pid=host: `ray stop` would see every Ray process on the host; stopping the
      # container ends exactly the processes it started (Ray, MPS daemons, jobs).
      docker rm --force "$CONTAINER" >/dev/null
      echo "removed container $CONTAINER"
    else
      echo "no container $CONTAINER"
    fi
  else
    ray stop
  fi
}

case "${1:-}" in
  start) start ;;
  sweep) shift; sweep "$@" ;;
  status) status ;;
  stop) stop ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
