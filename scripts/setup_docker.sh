#!/usr/bin/env bash
# Make a Docker engine and the looplift sandbox image available on this machine.
#
# Idempotent: every step checks first and does nothing when its work is already done, so CI and dev
# machines can run it on every boot. Needs root (apt-get, dockerd, debootstrap).
#
#   scripts/setup_docker.sh [PYTHON]      # PYTHON defaults to .venv/bin/python next to this script
#
# What it does, in order:
#   1. apt-get install docker.io and debootstrap when dockerd (or debootstrap) is missing;
#   2. start `dockerd --bridge=none --iptables=false` in the background (log: /tmp/dockerd.log) when
#      `docker info` does not answer, then wait up to 60 s for it. --bridge=none because sandboxes need
#      no network and no traffic may leave for private address ranges;
#   3. build the sandbox image offline (`python -m sandboxes.cli build-image`), a no-op if it exists;
#   4. build the 3D sandbox image the same way plus Blender as the `bpy` wheel (`build-image --3d`: ~1 minute
#      and a 373 MB wheel download from the package index; ~1.3 GB on disk), a no-op if it exists.
#      LOOPLIFT_SKIP_3D_IMAGE=1 skips it (the modeling family then cannot run here).
# What it does not do: configure rootless Docker, a registry, or a systemd unit.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${1:-$HERE/.venv/bin/python}"
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

log() { printf '[setup_docker] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "must run as root (apt-get, dockerd and debootstrap need it); try: sudo $0 $*"
    exit 1
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
fi

engine_answers() { docker info >/dev/null 2>&1; }

if ! engine_answers; then
    log "starting dockerd (log: $DOCKERD_LOG)"
    # setsid + nohup: the engine must outlive this script and the shell that ran it.
    setsid nohup dockerd --bridge=none --iptables=false >"$DOCKERD_LOG" 2>&1 < /dev/null &
    deadline=$((SECONDS + WAIT_S))
    until engine_answers; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "dockerd did not answer within ${WAIT_S}s; last lines of $DOCKERD_LOG:"
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            exit 1
        fi
        sleep 1
    done
fi
log "docker engine answers: $(docker version --format '{{.Server.Version}}')"

if [ ! -x "$PYTHON" ]; then
    log "python not found at $PYTHON; pass the venv python as the first argument"
    exit 1
fi
cd "$HERE"
"$PYTHON" -m sandboxes.cli build-image
if [ "${LOOPLIFT_SKIP_3D_IMAGE:-0}" != "1" ]; then
    "$PYTHON" -m sandboxes.cli build-image --3d
fi
log "done"
