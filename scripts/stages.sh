# Sourced by scripts/test and .ci/run: `stage NAME COMMAND...` runs one
# stage and records its time; the times are printed when the script exits,
# also when a stage fails. `timed_binaries` prefixes cargo test's
# "Running" lines with the seconds since the stage began, so the log shows
# each test binary's time, and appends "SECONDS BINARY" for each binary to
# the file $KILN_BINARY_TIMES when that is set (`slowest_binaries` lists
# the slowest).

stage_times=()

stage() {
  local name="$1" t0=$SECONDS status=0
  shift
  echo "== stage $name"
  "$@" || status=$?
  # No command substitution that can fail here: under `set -e` a failing
  # one in an assignment ends the calling script.
  local outcome=""
  if [ "$status" -ne 0 ]; then outcome=" (failed, exit $status)"; fi
  stage_times+=("$name: $((SECONDS - t0)) s$outcome")
  return "$status"
}

print_stage_times() {
  [ "${#stage_times[@]}" -eq 0 ] && return
  echo "stage times:"
  printf '  %s\n' "${stage_times[@]}"
}

timed_binaries() {
  local t0=$SECONDS line current="" since=0
  while IFS= read -r line; do
    case "$line" in
      *" Running "* | *" Doc-tests "*)
        binary_took "$current" "$since"
        current="${line#*Running }"
        current="${current#*Doc-tests }"
        since=$SECONDS
        echo "[+$((SECONDS - t0)) s] $line"
        ;;
      *) echo "$line" ;;
    esac
  done
  binary_took "$current" "$since"
}

# Records that test binary $1, begun at $2 (SECONDS), has ended.
binary_took() {
  [ -n "$1" ] && [ -n "${KILN_BINARY_TIMES:-}" ] && echo "$((SECONDS - $2)) $1" >>"$KILN_BINARY_TIMES"
  return 0
}

# The ten slowest test binaries recorded in $KILN_BINARY_TIMES.
slowest_binaries() {
  [ -s "${KILN_BINARY_TIMES:-}" ] || return 0
  echo "slowest test binaries (seconds):"
  sort -rn "$KILN_BINARY_TIMES" | head -n 10 | sed 's/^/  /'
}
