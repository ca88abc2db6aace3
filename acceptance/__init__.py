"""Acceptance kit: runs the contract's eight acceptance checks against a live deployment over HTTP.

Standard library only, so it runs on a bare host with nothing but Python 3.11 or later. It knows the service
only through its HTTP surface and the model's metrics endpoint.

cli         python -m acceptance: the command (options: its arguments), the run, the two report files
runner      runs the selected checks in order and collects their results (report: the results and their rendering)
checks/     the eight checks in the contract's order, each run(ctx) -> (status, reason, numbers): positive (1),
            negative (2), stability (3), latency (4), vram (5), overcap (6), chunking (7), limits (8); common: what
            they share
pass_rules  the contract's bench figures and the pass rules of checks 1-3 derived from them               (pure)
rows        the labelled rows and reference predictions the kit reads; data/: the smoke rows --rows defaults to
convert     python -m acceptance.convert: the bench's files in the kit's input format
scoring     rows scored through /decide, one at a time; compare: accuracy, agreement, chunk equality       (pure)
shapes      request bodies at the measured shapes, the anchor request, a state grown to a token count
client      HTTP to the service and its metrics endpoint; metrics: reading Prometheus text              (I/O)
memory      sizing the VRAM cap from measured memory; nvsmi: nvidia-smi on this host, when it exists
restart     restarting the service between scorings (check 3) and waiting for a new model process
stats       latency summaries and the project's one percentile                                         (pure)
"""
