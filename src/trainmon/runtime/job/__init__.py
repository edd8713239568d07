"""TODO: runtime/job/."""
