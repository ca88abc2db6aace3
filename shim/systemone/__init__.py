"""TypeSafe's System One and its batch, over the same predict() calls as the semif routes."""
