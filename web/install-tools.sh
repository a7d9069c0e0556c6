#!/usr/bin/env bash
# Install what the wasm build needs, when missing: the wasm32 target and
# wasm-bindgen-cli at exactly the wasm-bindgen version in Cargo.lock (the
# CLI and the crate must match).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ]; then
  rustup target add wasm32-unknown-unknown
fi
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none})"
  cargo install wasm-bindgen-cli --version "$want"
fi
