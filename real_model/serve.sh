#!/usr/bin/env bash
# Start vLLM's CPU build on the SmolLM2 folder on loopback; print the base URL once it answers.
# usage: serve.sh VLLM_VENV MODEL_DIR PORT RUN_DIR  (pid: RUN_DIR/server-PORT.pid, log: RUN_DIR/server-PORT.log)
set -euo pipefail
venv=$1 model=$2 port=$3 run=$4
mkdir -p "$run"
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} nohup "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$model" --served-model-name smollm2 --host 127.0.0.1 --port "$port" --max-model-len 8192 \
  --dtype float32 --enable-auto-tool-choice --tool-call-parser hermes --logprobs-mode processed_logprobs \
  >"$run/server-$port.log" 2>&1 &
echo $! >"$run/server-$port.pid"
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then echo "http://127.0.0.1:$port/v1"; exit 0; fi
  kill -0 "$(cat "$run/server-$port.pid")" 2>/dev/null || { echo "error: vLLM exited; see $run/server-$port.log" >&2; exit 1; }
  sleep 1
done
echo "error: vLLM did not answer within 300 s; see $run/server-$port.log" >&2
exit 1
