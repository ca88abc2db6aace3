"""The request before any route: pure ASGI middleware, one concern each, ordered in shim/app.py."""
