"""The model as both surfaces use it, below both: a surface plans its questions into calls (chunking), hands them to
the CallRunner (calls), and gets typed answers back (wire.answer) or a ModelFailure (shim/errors/failures.py). Nothing here
knows a surface.

model     the Protocol every model implements (Triton, the watch, the unit tests' fake), and a ping's Probe
calls     one request's calls under the process-wide lock (INV-2), counted and classified
chunking  at most 16 questions a call, packed greedily in request order                            (pure)
facts_cache  the model's facts (wire.facts), cached for FACTS_TTL_SECONDS
waiting   the wait for the lock, given up when the client goes (ClientGone) or the drain stops the queue
          (QueueStopped); the exception handlers answer them 499 and 503 draining
locks     acquiring a lock unless an event is set first
triton    the calls to Triton over our own HTTP/1.1 connections, each answer read once              (I/O)
http1     one kept-alive HTTP/1.1 connection to Triton, one request at a time (httptools)          (I/O)
watch     the model's liveness: pings, and reloads when its process died                           (I/O)
"""
