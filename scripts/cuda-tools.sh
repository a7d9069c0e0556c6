# CUDA's compilers for the CUDA compile checks, from NVIDIA's PyPI wheels
# (no GPU needed): NVRTC (libnvrtc.so.13) and ptxas, CUDA 13.0 (what NVIDIA's
# driver 580 and newer run). Sourced by scripts/setup (which installs
# them) and scripts/test (which puts them on the paths).
cuda_tools_dir="${KILN_CUDA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/cuda-tools}"
cuda_tools_root="$cuda_tools_dir/nvidia/cu13"
cuda_tools_wheels=("nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-nvcc==13.0.*")

cuda_tools_present() {
  [ -e "$cuda_tools_root/lib/libnvrtc.so.13" ] && [ -x "$cuda_tools_root/bin/ptxas" ]
}

cuda_tools_install() {
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$cuda_tools_dir" "${cuda_tools_wheels[@]}"
}

# The paths the checks find them on (scripts/test also requires them).
cuda_tools_env() {
  export LD_LIBRARY_PATH="$cuda_tools_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$cuda_tools_root/bin:$PATH"
}
