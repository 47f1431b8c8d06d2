"""Agent Lightning's LLM proxy (`agentlightning.LLMProxy`) in front of one upstream, for bench/proxy_overhead.py.

Runs in Agent Lightning's own venv (the bench installs it; never a project dependency):

    python agent_lightning_proxy.py UPSTREAM_V1_URL MODEL PORT STORE_PORT

Starts the proxy as its users do (a LiteLLM proxy with Agent Lightning's middlewares, its token-id
callback and OpenTelemetry export into an in-memory LightningStore behind its store server), prints a rollout's base URL on the
first line of stdout once it answers (LiteLLM's own output goes to stderr), then serves until terminated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def serve(upstream: str, model: str, port: int, store_port: int) -> None:
    """Start the proxy, print its base URL, and wait for SIGTERM."""
    import agentlightning as agl

    # LiteLLM prints banners on stdout (its process inherits it): keep stdout for the URL line alone
    url_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    # as Agent Lightning's own example serves a vLLM server: an in-memory store behind its store server
    # (the proxy runs in a process of its own and sends its spans there)
    # its span exporter is built before the store is known and keeps the default OTLP endpoint with the
    # opentelemetry-exporter-otlp pip resolves today: point it at the store server's, as the proxy means to
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{store_port}/v1/traces"
    store = agl.LightningStoreServer(agl.InMemoryLightningStore(), "127.0.0.1", store_port)
    await store.start()
    # num_retries 2: LiteLLM's aiohttp transport at times writes to a pooled connection the upstream has
    # closed ("Can not write request body"); with Agent Lightning's default of 0 such calls answer 500
    proxy = agl.LLMProxy(port=port, host="127.0.0.1", store=store, num_retries=2, model_list=[{
        "model_name": model,
        "litellm_params": {"model": f"hosted_vllm/{model}", "api_base": upstream, "api_key": "none"},
    }])
    await proxy.start()
    # the proxy logs a call's spans to the store under the rollout and attempt its URL names: one rollout
    # registered as a runner registers it, its calls sent under /rollout/{id}/attempt/{id}/v1
    rollout = await store.start_rollout(input={"task": "bench"})
    print(f"http://127.0.0.1:{port}/rollout/{rollout.rollout_id}/attempt/{rollout.attempt.attempt_id}/v1",
          file=url_out, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await proxy.stop()
    await store.stop()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
