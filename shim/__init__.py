"""The HTTP side: semif-serve's surface and TypeSafe's System One over one model port; app alone knows both.

app         the Starlette application, wiring only; build_service hands it over with its settings, drain and watch
server/     uvicorn as python -m shim runs it, each connection bounded before the app                        (I/O)
edge/       pure ASGI middleware before any route, one concern each, ordered in app
semif/      POST /decide and POST /decide/shared
systemone/  GET /v1/models, POST /v1/systemone and its batch, and the same operations as MCP tools at /mcp
health      GET /health and the model_up gauge, from what the watch knows
playground/  GET /playground, a page for people that calls the public API like any caller
port/       the model as both surfaces use it, under the process-wide lock
errors/     every error answered: the codes, the exceptions, the envelope and its one writer
drain       SIGTERM's drain: refuse new POSTs after DRAIN_SECONDS, answer the queue, exit when nothing is left
json_body   a request's JSON read strictly, off the event loop when it is large
client_gone  a request whose client went away is not scored (499)
context     the request's id and usage, in ContextVars
settings    configuration from INTERN_DECISION_* (validated, fail closed)
metrics     the Prometheus series, on a registry of their own                                      (pure)
metrics_server  the metrics' own HTTP server on a port of their own                                (I/O)
logs        JSON log lines, the request id on every one
tracing     OpenTelemetry's tracer, exporting over OTLP/HTTP when OTLP_ENDPOINT is set
openapi.json  the surface's OpenAPI document, served at /openapi.json with the registry's error codes (errors/)
"""
