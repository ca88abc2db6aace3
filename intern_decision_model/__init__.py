"""The model side of intern-decision-serve: everything model.py needs, importable without Triton.

settings   configuration from INTERN_DECISION_* (validated, fail closed)
offline    the environment that keeps the model off the network (INV-5)
checkpoint the pinned snapshot: path and hash checks, loading its inference.py by file path
guard      one predict() call with OOM / failure handling and memory release
engine     startup (INV-3, INV-4, INV-7, INV-8) and the per-request answer
protocol   the JSON wire protocol between the shim and this model
"""
