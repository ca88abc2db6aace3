"""The HTTP side of intern-decision-serve: semif-serve's surface and TypeSafe's System One on top of Triton.

Two surfaces, siblings over one model port; the app is the only module that knows both, and neither imports the
other. From the outside in:

app         the Starlette application: wiring only; one CallRunner (one lock) for both surfaces; build_service
            hands the app over with its settings, drain and watch (Service)
server/     uvicorn as python -m shim runs a Service, each connection bounded before the app: the limits, the
            connections' roster, the answers it writes itself, the protocol, the server that drains       (I/O)
edge/       the request before any route, pure ASGI middleware, one concern each, ordered in app:
            request_id, trace (the request's span, the caller's traceparent continued; only when tracing is on),
            access (one access line and the request series), framing (Transfer-Encoding; an answer
            before the body's end closes the connection), auth (401, with tokens), drain_gate (503 once the drain
            refuses), body (415 for an unknown Content-Encoding; once admitted, the body read within its limits
            and decoded by encoding), admission (429, at most MAX_QUEUE), disconnect (the client's leaving watched)
semif/      POST /decide and POST /decide/shared: request (the bodies checked into decisions), plan (decisions ->
            orderings -> waves -> calls), answers (per-ordering results and the averaged view), service, routes
systemone/  GET /v1/models, POST /v1/systemone and its batch: catalog, request, answers, service, routes; TypeSafe's
            conventions on those paths (conventions), the same operations as MCP tools at /mcp (mcp)
health      GET /health and the model_up gauge, from what the watch knows
playground/
            GET /playground: a page for people (static files from the package) and GET / pointing to it; it
            calls the public API like any caller and imports nothing of the shim
port/       the model as both surfaces use it: model (the Protocol and a ping's Probe), calls (one request's calls
            under the process-wide lock, counted and classified), chunking (at most 16 questions a call, greedy),
            facts_cache (the model's facts, cached), waiting and locks (the lock's wait, given up when the client
            goes or the drain stops the queue), triton and http1 (Triton over our own HTTP/1.1 connections), watch
            (the model's liveness: pings, and reloads when its process died)
errors/     every error answered, in one place: the registry of codes, the exceptions raised, the model's
            failures, the envelope in each surface's shape and its one writer, the exception handlers
drain       SIGTERM's drain: refuse new POSTs after DRAIN_SECONDS, answer the queue, exit when nothing is left
json_body   a request's JSON read strictly, off the event loop when it is large (both surfaces' routes and MCP)
client_gone
            a request whose client went away is not scored (the watched channel, ClientGone), 499
context     the request's id and usage, in ContextVars the middleware, the logs and the services share
settings    configuration from INTERN_DECISION_* (validated, fail closed)
metrics     the Prometheus series, on a registry of their own                                      (pure)
metrics_server  the metrics' own HTTP server on a port of their own, each connection bounded        (I/O)
logs        JSON log lines, the request id on every one, the trace id while tracing is on              (pure)
tracing     OpenTelemetry's tracer: the spans exported over OTLP/HTTP when OTLP_ENDPOINT is set, else none
openapi.json  the surface's OpenAPI document, served at /openapi.json
"""
