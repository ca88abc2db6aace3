"""The model as both surfaces use it: a surface plans its questions into calls (chunking), the CallRunner runs them
(calls) and hands back typed answers or a ModelFailure. Nothing here knows a surface.

model     the Protocol every model implements, and a ping's Probe
calls     one request's calls under the process-wide lock (INV-2), counted and classified
chunking  at most 16 questions a call, packed greedily in request order                            (pure)
facts_cache  the model's facts (wire.facts), cached for FACTS_TTL_SECONDS
waiting   the wait for the lock, given up when the client goes or the drain stops the queue
locks     acquiring a lock unless an event is set first
triton    the calls to Triton over our own HTTP/1.1 connections                                    (I/O)
http1     one kept-alive HTTP/1.1 connection to Triton, one request at a time                      (I/O)
watch     the model's liveness: pings while idle and after a failure                               (I/O)
"""
