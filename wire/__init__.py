"""The wire protocol between the shim and the model, written once and imported by both sides (standard library only).

protocol     tensor names and types, the error kinds and how an error message is written and read
strict_json  the strict JSON decoder both sides use for what they receive, and the strict encoder
facts        the model's facts: typed, and to and from the labels of the model's info metric
answer       one call's answer: the keys the model adds to predict()'s output, and the typed answer the shim reads
ping         the ping, what answers it, Triton's API key header; python -m wire.ping for healthchecks
env          how an INTERN_DECISION_* value is read (both sides' settings), port numbers, host:port addresses
tracing      OTLP_ENDPOINT, where spans go (the shim's and Triton's), and tritonserver's flags for it

docs/wire-protocol.md describes the protocol in prose.
"""
