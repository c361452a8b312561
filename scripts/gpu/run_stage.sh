# Sourced by the GPU drivers (check_all.sh, airbench.sh): run CMD... prints the command, its exit
# status and seconds, and lists a failed command in $out/FAILED (run is called inside pipelines,
# so a shell variable would not survive); the driver exits 1 when that list is not empty.
run() {
  echo "== $*"
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  echo "== rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || echo "rc=$rc: $*" >> "$out/FAILED"
  return "$rc"
}
