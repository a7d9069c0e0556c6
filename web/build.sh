#!/usr/bin/env bash
# Build the browser demo into web/dist/: the kiln-web crate for
# wasm32-unknown-unknown, wasm-bindgen's JS glue, the pages and the MNIST
# subset (data/mnist-10k) and the GPT corpus (data/kjv). Installs the wasm
# tools first when missing.
# The wasm build goes to $CARGO_TARGET_DIR/wasm (default target/wasm), so it
# does not evict the native build.
set -euo pipefail
web="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$web")"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}/wasm"

bash "$web/install-tools.sh"
CARGO_TARGET_DIR="$target_dir" cargo build -p kiln-web --lib --target wasm32-unknown-unknown --release

dist="$web/dist"
rm -rf "$dist"
mkdir -p "$dist/data"
wasm-bindgen --target web --no-typescript --out-dir "$dist/pkg" \
  "$target_dir/wasm32-unknown-unknown/release/kiln_web.wasm"
cp "$web"/www/* "$dist/"
cp "$root"/data/mnist-10k/*.gz "$dist/data/"
cp "$root"/data/kjv/genesis-ruth.txt "$dist/data/kjv.txt"
echo "built $dist ($(du -sh "$dist" | cut -f1))"
