#!/usr/bin/env bash
# Installs everything tiers needs on a Debian 12 machine, as root: the system
# packages (MPI, hwloc, Scotch, OTF2, likwid) and a project virtual
# environment with the Python packages.  Safe to re-run: it only installs
# what is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
venv=${TIERS_VENV:-$here/.venv}

debs=(
  build-essential cmake pkg-config gfortran
  openmpi-bin libopenmpi-dev
  mpich libmpich-dev
  slurm-wlm munge
  hwloc libhwloc-dev
  libscotch-dev scotch
  libotf2-trace-dev otf2-tools
  likwid hpcc libopenblas-dev
  lammps lammps-examples petsc-dev
  python3-venv python3-dev
  clang libclang-rt-14-dev
  chromium
)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install-deps: tiers needs Python >= 3.11 ($py is $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "install-deps: creating $venv"
  "$py" -m venv "$venv"
fi
stamp=$venv/.tiers-deps
reqs=$here/requirements.txt
if [ ! -f "$stamp" ] || [ "$reqs" -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  # a source build of mpi4py uses the MPI tiers uses by default: Open MPI's mpicc
  MPICC=${MPICC:-mpicc.openmpi} "$venv/bin/python" -m pip install -q -r "$reqs"
  cp "$reqs" "$stamp"
fi
