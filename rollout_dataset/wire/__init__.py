"""Pure wire-format conversions between model-server APIs and chat messages.

One definition of each mapping, imported by the proxy (what it sends upstream), the local backend
(how it renders a prompt, as vLLM does) and the graph/export (how a recorded call reads as chat):

- `rollout_dataset.wire.responses_chat`: the OpenAI Responses API <-> chat messages.

These modules import nothing of the package: no server, no I/O.
"""
