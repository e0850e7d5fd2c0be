# Sourced by the dev/gpu_*.sh scripts on the GPU machine: unpacks build-gpu/bundle.tar.xz into $work (removed
# on exit) and sets $bundle, $out (the device tool's $OUT, or build-gpu/out) and the library path (the bundle's
# libraries, then CUDA's: the toolkit's or PyTorch's wheels).
out=${OUT:-build-gpu/out}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf build-gpu/bundle.tar.xz
bundle=$work/bundle
cuda_libraries=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:$cuda_libraries${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
