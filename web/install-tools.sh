#!/usr/bin/env bash
# Install what the wasm build needs, when missing: the wasm32 target and
# wasm-bindgen-cli at exactly the wasm-bindgen version in Cargo.lock (the
# CLI and the crate must match).
# `--check`: only print what is missing (nothing when all is here).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$check" = 1 ]; then
  [ -d "$(rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ] || echo "rust target wasm32-unknown-unknown"
  [ "$have" = "$want" ] || echo "wasm-bindgen-cli $want (found: ${have:-none})"
  exit 0
fi
if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ]; then
  rustup target add wasm32-unknown-unknown
fi
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none})"
  cargo install wasm-bindgen-cli --version "$want"
fi
