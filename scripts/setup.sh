#!/usr/bin/env bash
# Installs everything elasticrun needs to build, test and run its demo on a
# fresh Debian 12 machine: Debian packages, then a Python venv (.venv) with
# the pinned packages of scripts/requirements.lock. A no-op when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler, CMake/Ninja, libraries (prometheus-cpp and cpp-httplib:
# the agent's HTTP server; cairo and the DejaVu fonts: elasticctl
# timeline's PNG; OpenSSL's libcrypto: the job secret's HMAC). Tests: Prometheus (scrapes the agents in
# test_metrics_api.py), tmux (elasticctl watch's terminal), Catch2, Debian's PyTorch 1.13
# (the pre-2.2 TCPStore client the legacy-dialect test talks to), clang with
# the libFuzzer runtime (scripts/fuzz.sh), SLURM with munge (test_slurm.py
# starts its own slurmctld and slurmd), etcd and openssl (the etcd
# rendezvous's tests start their own clusters, over https too; Debian's
# package starts none where there is no systemd).
APT_PACKAGES=(
  g++ cmake ninja-build pkg-config
  libuv1-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev libre2-dev libgloo-dev catch2
  prometheus-cpp-dev libcpp-httplib-dev libssl-dev prometheus libcairo2-dev fonts-dejavu-core tmux
  python3-venv python3-torch
  clang libclang-rt-14-dev
  procps iproute2
  slurm-wlm munge
  etcd-server openssl
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The venv is current when it was built from this exact lock file.
PYTHON=${PYTHON:-python3}
LOCK=scripts/requirements.lock
STAMP=.venv/.requirements.sha256
want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || ! -f $STAMP || $(cat "$STAMP") != "$want" ]]; then
  echo "setup: creating .venv from $LOCK (PyTorch is a large download; a few minutes)"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$LOCK"
  echo "$want" > "$STAMP"
fi
