"""The wire protocol between the shim and the model, written once and imported by both sides (standard library only).

protocol     tensor names, the protocol version, the error kinds and how an error message is written and read
strict_json  the strict JSON decoder both sides use for what they receive, and the strict encoder
facts        the model's facts: typed, and to and from the labels of the model's info metric
answer       one call's answer: the keys the model adds to predict()'s output, and the typed answer the shim reads

docs/wire-protocol.md describes the protocol in prose.
"""
