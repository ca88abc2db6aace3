"""TypeSafe's System One and its batch, over the same predict() calls as the semif routes.
Its map: docs/architecture.md, "Package maps"."""
