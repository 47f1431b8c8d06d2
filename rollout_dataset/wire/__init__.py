"""Pure wire-format conversions between model-server APIs and chat messages.

One definition of each mapping, imported by the proxy (what it sends upstream), the local backend
(how it renders a prompt, as vLLM does) and the graph/export (how a recorded call reads as chat):

- `rollout_dataset.wire.responses_chat`: the OpenAI Responses API <-> chat messages.
- `rollout_dataset.wire.anthropic_chat`: the Anthropic Messages API <-> chat messages.
- `rollout_dataset.wire.records`: a recorded call of any of these APIs as chat (request and answer):
  the one mapping the graph, the `conversations`/`trace` rows and the trace sessions read.
- `rollout_dataset.wire.content`: a chat message's content as text (the one reading of content
  parts; options for where formats differ).
- `rollout_dataset.wire.sse`: server-sent events: the one framing rule for every stream the package
  writes, and decoding through httpx-sse's public API.

These modules import nothing of the package but each other: no server, no I/O.
"""
