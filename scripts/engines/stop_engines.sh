#!/usr/bin/env bash
# Stop the engines that ci_engines.sh started, by the PIDs it recorded (each leads its own session, so its
# process group - vLLM's engine core and workers included - is signalled). SIGTERM, then SIGKILL after 20 s.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

stop_one() {
  local name="$1" pidfile="$ENGINES_RUN/$1.pid" pid t0
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping $name (pid $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    t0=$SECONDS
    while kill -0 "$pid" 2>/dev/null && (( SECONDS - t0 < 20 )); do sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name did not stop in 20 s: SIGKILL"; kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$pidfile"
}

# Both by default, or the ones named: stop_engines.sh [vllm] [llamacpp]
for name in "${@:-vllm llamacpp}"; do
  for n in $name; do stop_one "$n"; done
done
exit 0
