"""semif-serve's surface, kept: POST /decide and POST /decide/shared.
Its map: docs/architecture.md, "Package maps"."""
