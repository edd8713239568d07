"""TODO: runtime/capture/."""
