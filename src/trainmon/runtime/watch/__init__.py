"""TODO: runtime/watch/."""
