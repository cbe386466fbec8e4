#!/usr/bin/env bash
# Starts a Docker engine for the tests and benchmarks that use one (network
# coexistence with Docker's firewall rules, the `docker run` reference), when
# docker.io is installed and no engine answers yet. Prints nothing on success.
set -uo pipefail
command -v dockerd >/dev/null 2>&1 || exit 0
docker info >/dev/null 2>&1 && exit 0
if [[ $(id -u) -ne 0 ]]; then exit 0; fi
# The pinned runsc (scripts/runsc.sh), when built, is registered as the
# runtime "runsc" for the Docker backend's gVisor sandboxes
# (DOCKER_GVISOR_RUNTIME=runsc, TestGVisorDocker): an extra runtime, the
# default stays runc. --host-uds=create lets the agent's socket, made in
# its bind-mounted run directory inside gVisor, be a host socket.
args=(--host=unix:///var/run/docker.sock)
runsc=$("$(dirname "$0")/runsc.sh" --path)
if [[ -x $runsc ]]; then
  cat >/tmp/agentbox-dockerd.json <<JSON
{"runtimes": {"runsc": {"path": "$runsc", "runtimeArgs": ["--platform=systrap", "--host-uds=create"]}}}
JSON
  args+=(--config-file=/tmp/agentbox-dockerd.json)
fi
nohup dockerd "${args[@]}" >/tmp/agentbox-dockerd.log 2>&1 &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "start-docker: dockerd did not start (see /tmp/agentbox-dockerd.log); Docker tests will skip" >&2
exit 0
