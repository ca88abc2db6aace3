"""The HTTP side of intern-decision-serve: semif-serve's surface on top of Triton.

settings    configuration from INTERN_DECISION_* (validated, fail closed)
validation  the semif request bodies, checked and turned into decisions      (pure)
planning    decisions -> orderings -> waves -> calls of at most 16 questions (pure)
combining   per-ordering results and the averaged view                        (pure)
errors      the error envelope and the mapping of Triton's errors            (pure)
triton      the calls to Triton over tritonclient's asyncio HTTP client      (I/O)
middleware  auth, admission, the body limit and deadline as pure ASGI middleware (I/O)
access      one JSON access line and the request series per HTTP request    (I/O)
metrics     the Prometheus series, served on a port of their own           (I/O)
logs        JSON log lines, the request id on every one                     (pure)
service     one request's calls under the process-wide lock                  (I/O)
app         the Starlette application and its routes                         (I/O)
server      uvicorn as python -m shim runs it, request headers bounded        (I/O)
openapi.json  the surface's OpenAPI document, served at /openapi.json
"""
