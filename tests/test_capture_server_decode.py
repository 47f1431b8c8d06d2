"""Samples render against any server: without a local tokenizer, capture decodes through the
server's own /detokenize (and /tokenize for re-rendered conversations)."""

from __future__ import annotations

import re

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.capture.server_tokenizer import ServerTokenizer
from rollout_dataset.errors import UpstreamError


def _streams(samples: str) -> list[str]:
    return re.findall(r"````text\n(.*?)\n````", samples, flags=re.S)


def test_without_a_local_tokenizer_samples_show_the_servers_token_stream(local_backend_thread, tmp_path):
    def capture(name, tokenizer):
        out = tmp_path / name
        capture_rollout(CaptureConfig(out_dir=out, base_url=local_backend_thread.base_url, model="local",
                                      tokenizer=tokenizer, timeout_s=60, max_turns=1, seed=3))
        return (out / "samples.md").read_text()

    remote, local = capture("remote", None), capture("local", "builtin")
    assert "<|im_start|>" in remote and "No tokenizer" not in remote
    assert _streams(remote) == _streams(local) and _streams(remote)


def test_server_tokenizer_renders_a_conversation_as_the_server_does(local_backend_thread, builtin_tokenizer):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    with ServerTokenizer(local_backend_thread.base_url, "local") as remote:
        assert remote.apply_chat_template(messages) == builtin_tokenizer.apply_chat_template(messages, tokenize=False)
        ids = builtin_tokenizer.encode("<|im_start|>user\nhi", add_special_tokens=False)
        assert remote.decode(ids) == builtin_tokenizer.decode(ids, skip_special_tokens=False)


def test_a_server_without_detokenize_is_a_named_upstream_error():
    with ServerTokenizer("http://127.0.0.1:9/v1", "m") as remote, pytest.raises(UpstreamError, match="/detokenize"):
        remote.decode([1, 2, 3])


def test_an_answer_without_text_or_tokens_is_an_upstream_error_naming_the_url():
    import http.server
    import threading

    class EmptyAnswers(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EmptyAnswers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        with ServerTokenizer(url, "m") as remote:
            with pytest.raises(UpstreamError, match=r"127\.0\.0\.1:\d+/detokenize: no 'prompt' text"):
                remote.decode([1, 2, 3])
            with pytest.raises(UpstreamError, match=r"127\.0\.0\.1:\d+/tokenize: no 'tokens' list"):
                remote.apply_chat_template([{"role": "user", "content": "hi"}])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
