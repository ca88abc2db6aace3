"""semif-serve's surface, kept: POST /decide and POST /decide/shared."""
