#!/usr/bin/env bash
# Installs every Debian package ferry's build, tests and benchmarks need. Does nothing when they are
# already installed. Run as root (or with sudo available) on Debian 12 (the build needs CMake >= 3.25).
set -euo pipefail

packages=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwloc-dev liburing-dev fio
  libopenmpi-dev openmpi-bin
  libopenblas-dev libopenblas-openmp-dev
  nlohmann-json3-dev libcli11-dev
  python3 python3-torch python3-numpy
  chromium
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: every package is installed"
  exit 0
fi

sudo_prefix=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_prefix=(sudo)
fi
echo "setup: installing ${missing[*]}"
"${sudo_prefix[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_prefix[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
