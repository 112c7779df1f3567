#!/usr/bin/env bash
# Installs every Debian 12 package that dgpu's build, tests and benchmarks need.
# Idempotent: packages already present are skipped, so a second run is fast and offline.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-format clang-tidy clang libclang-rt-14-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  librestinio-dev libasio-dev libhttp-parser-dev libfmt-dev
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev libsqlite3-dev sqlite3 zlib1g-dev
  libcli11-dev libcurl4-openssl-dev curl libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  wrk prometheus etcd-server etcd-client
  python3 python3-yaml python3-jsonschema python3-pytest python3-pip python3-setuptools
  python3-wheel python3-venv ccache musl-tools
  chromium chromium-driver python3-selenium
  python3-torch
  procps psmisc util-linux iproute2 systemd
)
# make lint-api runs @redocly/cli on Node.js: Debian's nodejs and npm unless a Node.js with npm
# is installed already (e.g. from NodeSource, whose nodejs package carries npm).
NODE_PACKAGES=()
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  NODE_PACKAGES=(nodejs npm)
fi

# The pinned @redocly/cli (tools/package-lock.json) under tools/node_modules, when that is not
# what is installed there yet.
install_node_tools() {
  local tools
  tools="$(cd "$(dirname "$0")/.." && pwd)/tools"
  if cmp -s "$tools/package-lock.json" "$tools/node_modules/.dgpu-installed-lock"; then
    return
  fi
  echo "install-deps: npm ci in tools/"
  npm ci --prefix "$tools" --no-audit --no-fund
  cp "$tools/package-lock.json" "$tools/node_modules/.dgpu-installed-lock"
}

missing=("${NODE_PACKAGES[@]}")
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  install_node_tools
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The prometheus and etcd packages start system services when an init system is present;
# dgpu's tests start their own instances on free ports, so stop any that started.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus etcd >/dev/null 2>&1 || true
fi
install_node_tools
echo "install-deps: done"
