"""Small fake model servers for the proxy tests, served by uvicorn on 127.0.0.1 port 0.

The fake speaks vLLM's wire format (>= 0.10.2) for what the proxy cares about: `return_token_ids`
(top-level `prompt_token_ids`, per-choice `token_ids`, null when not asked), chat `logprobs`,
`token_id:N` logprob tokens, SSE chunks with the usage chunk on `stream_options.include_usage`.
The request's `model` picks a behaviour: "ok", "tool", "fail500", "slow", "drop", "endless",
"old" (ignores return_token_ids, logprob tokens as token_id:N), "plain" (no ids at all),
"badusage" (usage disagrees with the ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from typing import Any, AsyncIterator, Awaitable, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORDS = ["Hello", " there", ",", " world", "!"]


def prompt_ids(body: dict[str, Any]) -> list[int]:
    text = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
    return [b % 97 + 3 for b in text.encode()][:40]


def word_id(i: int, word: str) -> int:
    return 1000 + i * 7 + len(word)


def logprob(i: int) -> float:
    return -0.25 * (i + 1)


def lp_entry(i: int, word: str, as_ids: bool) -> dict[str, Any]:
    token = f"token_id:{word_id(i, word)}" if as_ids else word
    return {"token": token, "logprob": logprob(i), "bytes": list(word.encode()), "top_logprobs": []}


class FakeVLLM:
    """A Starlette app plus the log of request bodies it received."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
        ])

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "ok", "object": "model", "owned_by": "vllm"}]})

    async def tokenize(self, request: Request) -> Response:
        body = await request.json()
        ids = prompt_ids(body)
        return JSONResponse({"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None})

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        rti = body.get("return_token_ids") is True
        lp = body.get("logprobs")
        words = WORDS[: body.get("max_tokens") or len(WORDS)]
        logprobs = None
        if lp is not None:
            logprobs = {"text_offset": list(range(len(words))), "token_logprobs": [logprob(i) for i in range(len(words))],
                        "tokens": list(words), "top_logprobs": [{w: logprob(i)} for i, w in enumerate(words)]}
        choice = {"index": 0, "text": "".join(words), "logprobs": logprobs, "finish_reason": "length",
                  "stop_reason": None, "prompt_logprobs": None,
                  "prompt_token_ids": prompt_ids(body) if rti else None,
                  "token_ids": [word_id(i, w) for i, w in enumerate(words)] if rti else None}
        return JSONResponse({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": body.get("model"),
                             "choices": [choice], "usage": {"prompt_tokens": len(prompt_ids(body)),
                                                            "completion_tokens": len(words),
                                                            "total_tokens": len(prompt_ids(body)) + len(words)},
                             "kv_transfer_params": None})

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        mode = body.get("model", "ok")
        if mode == "fail500":
            return Response('{"error":{"message":"engine dead","type":"InternalServerError","code":500}}',
                            status_code=500, media_type="application/json", headers={"x-upstream": "yes"})
        if mode == "slow":
            await asyncio.sleep(5)
        if body.get("stream"):
            return StreamingResponse(self._stream(body, mode), media_type="text/event-stream")
        return JSONResponse(self._full(body, mode))

    def _flags(self, body: dict[str, Any], mode: str) -> tuple[bool, bool, bool]:
        rti = body.get("return_token_ids") is True and mode not in ("old", "plain")
        lp = bool(body.get("logprobs")) and mode != "plain"
        as_ids = mode == "old" or body.get("return_tokens_as_token_ids") is True
        return rti, lp, as_ids

    def _full(self, body: dict[str, Any], mode: str) -> dict[str, Any]:
        rti, lp, as_ids = self._flags(body, mode)
        words = WORDS[: body.get("max_tokens") or len(WORDS)]
        ids = [word_id(i, w) for i, w in enumerate(words)]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": "".join(words), "refusal": None, "tool_calls": [],
                        "reasoning_content": None},
            "logprobs": {"content": [lp_entry(i, w, as_ids) for i, w in enumerate(words)]} if lp else None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
        out: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": mode,
                               "choices": [choice]}
        completion_tokens = len(ids) + (3 if mode == "badusage" else 0)
        out["usage"] = {"prompt_tokens": len(prompt_ids(body)), "completion_tokens": completion_tokens,
                        "total_tokens": len(prompt_ids(body)) + completion_tokens}
        if mode not in ("old", "plain"):
            choice["token_ids"] = ids if rti else None
            out["prompt_token_ids"] = prompt_ids(body) if rti else None
        return out

    async def _stream(self, body: dict[str, Any], mode: str) -> AsyncIterator[str]:
        rti, lp, as_ids = self._flags(body, mode)
        vllm = mode not in ("old", "plain")

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": mode,
                   "choices": choices, **extra}
            return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"

        def choice(delta: dict[str, Any], i: int | None = None, word: str = "", finish: str | None = None,
                   ids: list[int] | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0, "delta": delta,
                                 "logprobs": ({"content": [lp_entry(i, word, as_ids)]} if lp and i is not None
                                              else None),
                                 "finish_reason": finish}
            if vllm:
                c["token_ids"] = (ids if ids is not None else []) if rti else None
            return c

        first: dict[str, Any] = {}
        if vllm:
            first["prompt_token_ids"] = prompt_ids(body) if rti else None
        yield chunk([choice({"role": "assistant", "content": ""})], **first)
        n = 0
        if mode == "tool":
            parts = ['{"cmd":', ' "ls', ' -la"}']
            yield chunk([choice({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                 "function": {"name": "bash", "arguments": ""}}]},
                               0, "<tool_call>", ids=[word_id(0, "<tool_call>")])])
            n = 1
            for j, part in enumerate(parts, start=1):
                yield chunk([choice({"tool_calls": [{"index": 0, "function": {"arguments": part}}]},
                                   j, part, ids=[word_id(j, part)])])
                n += 1
            yield chunk([choice({}, n, "</tool_call>", finish="tool_calls", ids=[word_id(n, "</tool_call>")])])
            n += 1
        else:
            words = WORDS[: body.get("max_tokens") or len(WORDS)]
            endless = mode == "endless"
            i = 0
            while i < len(words) or endless:
                w = words[i % len(words)]
                last = i == len(words) - 1 and not endless
                yield chunk([choice({"content": w}, i, w, finish="stop" if last else None, ids=[word_id(i, w)])])
                n += 1
                i += 1
                if mode == "drop" and i == 2:
                    raise RuntimeError("fake upstream drops the connection mid-stream")
                if endless:
                    await asyncio.sleep(0.02)
        if (body.get("stream_options") or {}).get("include_usage"):
            pt = len(prompt_ids(body))
            ct = n + (3 if mode == "badusage" else 0)
            yield chunk([], usage={"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct})
        yield "data: [DONE]\n\n"


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app on 127.0.0.1 port 0 in the running loop; yield its root URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical", access_log=False))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await task


class FaultyUpstream:
    """A raw ASGI model server that answers generation calls wrongly on purpose (the request's `model` picks how).

    Non-streamed: "index_list" (``choices[].index`` a list), "choices_dict", "wrong_ids" (ids of wrong
    types), "invalid_json", "deep" (a response nested 1,000 deep), "surrogate" (a lone ``\\udcff``),
    "fail500", "chunked" (a good answer without content-length), "big" (200 kB). Streamed (``stream: true``): "index_list", "invalid_json" (an event that is not JSON),
    "drop" (connection cut after one event), "no_done" (ends without ``[DONE]``), "surrogate", "ok".
    """

    CHUNK = ('{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
             '"delta":{"content":"hi"},"finish_reason":null}]}')

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.calls += 1
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        mode = body.get("model", "ok") if isinstance(body, dict) else "ok"
        if isinstance(body, dict) and body.get("stream"):
            await self._stream(mode, send)
            return
        bodies = {
            "index_list": b'{"id":"x","object":"chat.completion","choices":[{"index":[0],"message":'
                          b'{"role":"assistant","content":"a"},"finish_reason":"stop","token_ids":[1,2]},'
                          b'{"index":1,"message":{"role":"assistant","content":"b"},"token_ids":[3]}],'
                          b'"prompt_token_ids":[3]}',
            "choices_dict": b'{"id":"x","object":"chat.completion","choices":{"0":{"message":"a"}},"usage":[]}',
            "wrong_ids": b'{"id":7,"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
                         b'"content":5},"token_ids":[1,"x",true],"logprobs":{"content":7}}],"prompt_token_ids":["a",2]}',
            "invalid_json": b'{"id": "x", "choices": [',
            "deep": b"[" * 1000 + b"]" * 1000,
            "surrogate": b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
                         b'"content":"a\\udcffb"},"finish_reason":"stop","token_ids":[5]}],"prompt_token_ids":[1]}',
            "fail500": b'{"error":{"message":"engine dead","type":"InternalServerError","code":500}}',
            "big": b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
                   b'"content":"' + b"y" * 200_000 + b'"},"finish_reason":"stop"}]}',
        }
        data = bodies.get(mode, b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
                                b'{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}')
        status = 500 if mode == "fail500" else 200
        if mode == "chunked_big":
            mode, data = "chunked", bodies["big"]
        if mode == "chunked":  # no content-length: the body arrives in pieces
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            step = max(7, len(data) // 20)
            for i in range(0, len(data), step):
                await send({"type": "http.response.body", "body": data[i:i + step], "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _stream(self, mode: str, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        first = {"index_list": self.CHUNK.replace('"index":0', '"index":[0]'),
                 "invalid_json": '{"choices": [nope',
                 "surrogate": self.CHUNK.replace('"hi"}', '"h\\udcffi"},"token_ids":[5]')}.get(mode, self.CHUNK)
        await send({"type": "http.response.body", "body": f"data: {first}\n\n".encode(), "more_body": True})
        if mode == "drop":
            raise RuntimeError("the faulty upstream cuts the stream")
        await send({"type": "http.response.body", "body": f"data: {self.CHUNK}\n\n".encode(), "more_body": True})
        tail = b"" if mode == "no_done" else b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail, "more_body": False})


@contextlib.asynccontextmanager
async def serve_raw(answer: Callable[[bytes], Awaitable[tuple[bytes, bool]]], tls: ssl.SSLContext | None = None
                    ) -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """A TCP server on 127.0.0.1 port 0 that answers each HTTP request with the bytes a test gives.

    `answer(request_head)` gets the request line and headers of each request read on a connection
    and returns (the raw bytes to send back, whether to close the connection after them). Yields
    the root URL and the list of connections accepted so far (their writers). With `tls`, the
    server speaks HTTPS with that context.
    """
    accepted: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                data, close = await answer(head)
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the proxy closed its side, or the test is over
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}", accepted
    finally:
        server.close()
        await server.wait_closed()


def valid(records: list[dict]) -> list[dict]:
    """Assert every trace record matches `trace_record.schema.json`; return the records unchanged."""
    from rollout_dataset.schema import schema_errors

    for record in records:
        assert schema_errors(record, "trace_record") == [], record
    return records
