"""The request before any route: pure ASGI middleware, one concern each, knowing no route prefix, ordered in
shim/app.py (for a POST: auth, drain_gate, KnownEncoding, admission, BodyReader, from the headers until admitted).

request_id  X-Request-Id on every response, and the request's ContextVar
trace       the request's span, continuing the caller's traceparent (only when tracing is on)
access      one access line and the request series per request
framing     Transfer-Encoding other than chunked refused; an early answer closes the connection
auth        the bearer token
tokens      the tokens auth accepts, compared in constant time
drain_gate  a new POST refused once the drain refuses
admission   at most MAX_QUEUE POSTs queued or scoring, MAX_QUEUE_PER_PEER of them from one source
queue_share  who holds the queue's places, and whose place a lighter source takes when it is full       (pure)
body        the Content-Encoding known, the body read within its limits, decoded and replayed
encoding    gzip and zstd decoded within the body's limit, in bounded steps
disconnect  the POST's channel watched for the client's leaving
posts       which requests the POST guards apply to
"""
