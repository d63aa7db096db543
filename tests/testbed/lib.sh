# Shared by tests/testbed/up and tests/testbed/crash (sourced, not run). The caller
# defines `fail MESSAGE` (report and exit) and `timeout_s` (seconds a wait may take).

wait_for() { # WHAT LOG CMD... : poll CMD until it succeeds, or fail after the timeout
  local what="$1" log="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout_s ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "--- last lines of $log:" >&2
      tail -n 30 "$log" >&2 || true
      fail "timed out after ${timeout_s}s waiting for $what"
    fi
    sleep 0.5
  done
}

healthy() { # URL: HTTPS or HTTP endpoint answering "ok"/health true
  local out
  out="$(curl -sk --max-time 5 "$@")" || return 1
  [[ "$out" == ok || "$out" == *'"health":"true"'* ]]
}
