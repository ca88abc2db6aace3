"""The HTTP side: semif-serve's surface and TypeSafe's System One over one model port; app alone knows both."""
