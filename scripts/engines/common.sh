# Shared settings for the real-engine scripts (sourced, not run).
# Everything lives outside git under SERVELAB_ENGINES_HOME; URLs are written to SERVELAB_ENGINES_ENV.

ENGINES_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENGINES_HOME="${SERVELAB_ENGINES_HOME:-$HOME/.cache/servelab-engines}"
ENGINES_ENV="${SERVELAB_ENGINES_ENV:-$ENGINES_REPO/.ci/engines.env}"
ENGINES_RUN="$ENGINES_HOME/run"   # pid files
ENGINES_LOGS="$ENGINES_HOME/logs"
ENGINES_PYTHON="${SERVELAB_ENGINES_PYTHON:-python3}"

LLAMACPP_VENV="$ENGINES_HOME/llamacpp-venv"
LLAMACPP_PORT="${SERVELAB_LLAMACPP_PORT:-8091}"
LLAMACPP_MODEL_NAME="smollm2-135m-instruct"
LLAMACPP_PARALLEL="${SERVELAB_LLAMACPP_PARALLEL:-4}"

VLLM_VENV="$ENGINES_HOME/vllm-venv"
VLLM_PORT="${SERVELAB_VLLM_PORT:-8092}"
VLLM_VERSION="${SERVELAB_VLLM_VERSION:-0.32.0}"
VLLM_TORCH="${SERVELAB_VLLM_TORCH:-2.13.0}"
VLLM_MODEL_DIR="$ENGINES_HOME/models/tiny-llama"
VLLM_MODEL_NAME="tiny-llama"
VLLM_MAX_NUM_SEQS="${SERVELAB_VLLM_MAX_NUM_SEQS:-8}"

mkdir -p "$ENGINES_RUN" "$ENGINES_LOGS"

say() { printf '[engines %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# healthy URL -> 0 when it answers 2xx within 2 s
healthy() { "$ENGINES_PYTHON" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    sys.exit(0 if 200 <= r.status < 300 else 1)
EOF
}

# alive PIDFILE -> 0 when the process in PIDFILE runs
alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_healthy NAME URL PIDFILE TIMEOUT_S LOG -> 0 when healthy; 1 when the process died or time ran out
wait_healthy() {
  local name="$1" url="$2" pidfile="$3" limit="$4" log="$5" t0=$SECONDS
  while (( SECONDS - t0 < limit )); do
    if healthy "$url"; then say "$name healthy at $url after $((SECONDS - t0)) s"; return 0; fi
    if ! alive "$pidfile"; then
      say "$name exited before becoming healthy; last lines of $log:"; tail -n 30 "$log" >&2 || true; return 1
    fi
    sleep 1
  done
  say "$name not healthy at $url after ${limit} s; last lines of $log:"; tail -n 30 "$log" >&2 || true
  return 1
}

# The vLLM server command (one place, used by ci_engines.sh, the tests' sweep and the benchmark).
vllm_serve_argv() {  # PORT MAX_NUM_SEQS
  printf '%s\n' "$VLLM_VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$VLLM_MODEL_DIR" --served-model-name "$VLLM_MODEL_NAME" --host 127.0.0.1 --port "$1" \
    -O0 --enable-prefix-caching --max-num-seqs "$2" --max-model-len 2048 --dtype bfloat16
}
