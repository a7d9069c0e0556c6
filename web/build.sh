#!/usr/bin/env bash
# Build the browser demo into web/dist/: the kiln-web crate for
# wasm32-unknown-unknown, wasm-bindgen's JS glue, the pages and the MNIST
# subset. Installs the wasm target and wasm-bindgen-cli (pinned to the
# wasm-bindgen version in Cargo.lock) when missing.
# Env: CARGO_TARGET_DIR (default: the workspace's target/), KILN_CARGO_LOCK
# (a file to flock around cargo, for shared machines), PROFILE (release).
set -euo pipefail
web="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$web")"
cd "$root"
profile="${PROFILE:-release}"
target_dir="${CARGO_TARGET_DIR:-$root/target}/wasm"

cargo_() {
  if [ -n "${KILN_CARGO_LOCK:-}" ]; then flock "$KILN_CARGO_LOCK" cargo "$@"; else cargo "$@"; fi
}

if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none})"
  cargo_ install wasm-bindgen-cli --version "$want"
fi

CARGO_TARGET_DIR="$target_dir" cargo_ build -p kiln-web --lib --target wasm32-unknown-unknown --profile "$profile"

dist="$web/dist"
rm -rf "$dist"
mkdir -p "$dist/data"
wasm-bindgen --target web --no-typescript --out-dir "$dist/pkg" \
  "$target_dir/wasm32-unknown-unknown/$profile/kiln_web.wasm"
cp "$web"/www/* "$dist/"
cp "$root"/data/mnist-10k/*.gz "$dist/data/"
echo "built $dist ($(du -sh "$dist" | cut -f1))"
