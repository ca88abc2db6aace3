"""The model side: everything model.py needs, importable without Triton (its modules: docs/architecture.md)."""
