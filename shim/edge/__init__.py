"""What happens to a request before any route: pure ASGI middleware, one concern each, knowing no route prefix,
ordered in shim/app.py. For a POST, in the contract's order: auth (401), drain_gate (503), body's KnownEncoding
(415), admission (429), then body's BodyReader (413, 408, 422), all from the headers alone until admitted; last,
the disconnect watch.

request_id  X-Request-Id on every response, and the request's ContextVar
trace       the request's span, continuing the caller's traceparent (installed only when tracing is on)
access      one access line and the request series per request
framing     Transfer-Encoding other than chunked refused; an answer before the body's end closes the connection
auth        the bearer token
tokens      the tokens auth accepts: API_TOKEN and API_TOKEN_NEXT, compared in constant time
drain_gate  a new POST refused once the drain refuses (shim/drain.py)
admission   at most MAX_QUEUE POSTs queued or scoring
body        the Content-Encoding known, the body read within MAX_BODY_BYTES and BODY_TIMEOUT_SECONDS, decoded
            and replayed to the app
encoding    gzip and zstd decoded within the body's limit, in bounded steps
disconnect  the POST's channel watched for the client's leaving (shim/client_gone.py: never scored, 499)
posts       which requests the POST guards apply to (is_post); their refusals: shim/errors/answer.py
"""
