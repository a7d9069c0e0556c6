# Python's safetensors and numpy, for the test that reads kiln's quantized
# checkpoints from Python as documented (nn/tests/python). From PyPI into
# kiln's cache, as CUDA's compilers are. Sourced by scripts/setup (which
# installs them) and scripts/test (which points the test at them).
py_tools_dir="${KILN_PY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/py-tools}"
py_tools_wheels=("safetensors==0.7.*" "numpy==2.3.*")

py_tools_present() {
  PYTHONPATH="$py_tools_dir" python3 -c 'import safetensors.numpy, numpy' >/dev/null 2>&1
}

py_tools_install() {
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --target "$py_tools_dir" "${py_tools_wheels[@]}"
}

# Where the test finds them (scripts/test also requires them).
py_tools_env() {
  export KILN_PY_TOOLS="$py_tools_dir"
}
