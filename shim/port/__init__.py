"""The model as both surfaces use it, knowing no surface: calls planned, run under the lock, answers typed."""
