"""The wire protocol between the shim and the model, imported by both sides (standard library only).

protocol     tensor names and types, the error kinds, how an error message is written and read
strict_json  the strict JSON decoder and encoder both sides use
facts        the model's facts, typed, to and from the labels of the model's info metric
answer       one call's answer: what the model adds to predict()'s output, and the typed answer the shim reads
ping         the ping and Triton's API key header; python -m wire.ping for healthchecks
liveness     Triton's liveness verdict: up, busy or down
env          how an INTERN_DECISION_* value is read, port numbers, host:port addresses
tracing      OTLP_ENDPOINT, where spans go, and tritonserver's flags for it
"""
