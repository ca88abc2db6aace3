"""The model side: everything model.py needs, importable without Triton."""
