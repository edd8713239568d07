"""TODO: runtime/processes/."""
