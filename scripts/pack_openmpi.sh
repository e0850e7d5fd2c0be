#!/usr/bin/env bash
# Copies Open MPI's runtime (mpirun, orted, its plugins, help texts, settings) and the shared libraries
# they load into DEST, for a GPU machine that has no MPI of its own (the device tool's have no apt).
# scripts/gpu_grid_check.sh runs it there relocated (OPAL_PREFIX=DEST and the OPAL_* directories).
#   bash scripts/pack_openmpi.sh DEST     # called by scripts/gpu_bundle.sh
set -euo pipefail
dest=$1
arch=x86_64-linux-gnu
mkdir -p "$dest/bin" "$dest/lib/$arch/openmpi/lib" "$dest/lib/$arch/pmix2/lib" "$dest/share" "$dest/etc" "$dest/deps"
cp -L /usr/bin/orterun "$dest/bin/mpirun"
cp -L /usr/bin/orted "$dest/bin/orted"
cp -rL /usr/lib/$arch/openmpi/lib/openmpi3 "$dest/lib/$arch/openmpi/lib/"
cp -rL /usr/lib/$arch/pmix2/lib/pmix "$dest/lib/$arch/pmix2/lib/"
cp -rL /usr/share/openmpi "$dest/share/"
cp -L /etc/openmpi/openmpi-mca-params.conf "$dest/etc/"
printf '%s\n' localhost > "$dest/etc/openmpi-default-hostfile"
# The libraries they load beyond glibc's (a plugin whose library is missing there would not load).
ldd "$dest"/bin/* "$dest"/lib/$arch/openmpi/lib/openmpi3/*.so "$dest"/lib/$arch/pmix2/lib/pmix/*.so 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    *) cp -L "$library" "$dest/deps/" ;;
  esac
done
