"""The HTTP side of intern-decision-serve: semif-serve's surface and TypeSafe's System One on top of Triton.

settings    configuration from INTERN_DECISION_* (validated, fail closed)
validation  the semif request bodies, checked and turned into decisions      (pure)
planning    decisions -> orderings -> waves -> calls of at most 16 questions (pure)
combining   per-ordering results and the averaged view                        (pure)
errors      the error envelope, the public errors, the one failure type of a call (Failure on wire.Kind) (pure)
model       the Protocol every model implements (Triton, the watch, the tests' fake), and a ping's Probe
context     the request's id and usage, in ContextVars the middleware, the logs and the services share
encoding    gzip and zstd request bodies decoded within the body limit        (pure)
triton      the calls to Triton over our own HTTP/1.1 connections, each answer read once into wire.answer (I/O)
watch       the model's liveness: pings, and reloads when its process died   (I/O)
calls       one request's calls under the process-wide lock, counted and classified (I/O)
middleware  auth, the encoding, admission, the body limit and deadline as pure ASGI middleware (I/O)
framing     a Transfer-Encoding other than chunked refused, an answer before the body's end closing the connection
drain       SIGTERM's drain: refuse new POSTs after DRAIN_SECONDS, answer the queue, exit when nothing is left
access      one JSON access line and the request series per HTTP request    (I/O)
metrics     the Prometheus series, served on a port of their own           (I/O)
logs        JSON log lines, the request id on every one                     (pure)
health      GET /health and the model_up gauge                               (I/O)
service     the semif requests: decisions planned, calls run, results assembled (I/O)
semif       the semif routes, bound to their service
systemone/  GET /v1/models, POST /v1/systemone and its batch (routes bound to their service), TypeSafe's
            conventions on those paths (conventions), and the same operations as MCP tools at /mcp (mcp)
handlers    every error answered in the envelope
app         the Starlette application: wiring only; one CallRunner (one lock) for both surfaces
server      uvicorn as python -m shim runs it, request headers bounded        (I/O)
openapi.json  the surface's OpenAPI document, served at /openapi.json
"""
