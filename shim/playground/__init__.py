"""The playground page; it calls the public API like any caller, so it imports nothing of the shim."""
