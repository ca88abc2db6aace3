"""The wire protocol between the shim and the model, imported by both sides (standard library only)."""
