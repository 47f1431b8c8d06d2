"""The garbage-collector tuning of dedicated server processes (`rollout_dataset.serving.tune_gc_for_serving`)."""

from __future__ import annotations

import gc
import subprocess
import sys

import httpx

from rollout_dataset.proxy import CaptureProxy
from rollout_dataset.serving import SERVING_GC_THRESHOLDS


def test_tuning_a_serving_process_freezes_what_is_loaded_and_raises_the_thresholds():
    code = ("import gc; from rollout_dataset.serving import tune_gc_for_serving; tune_gc_for_serving(); "
            "print(gc.get_threshold(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{SERVING_GC_THRESHOLDS} True"


async def test_a_proxy_run_as_a_library_leaves_the_callers_collector_alone(tmp_path):
    before = gc.get_threshold()
    app = httpx.MockTransport(lambda request: httpx.Response(200, json={"data": []}))
    async with CaptureProxy(upstream="http://upstream.invalid/v1", trace_dir=tmp_path, transport=app) as proxy:
        async with httpx.AsyncClient() as client:
            assert (await client.get(proxy.base_url + "/models")).status_code == 200
    assert gc.get_threshold() == before and before != SERVING_GC_THRESHOLDS
