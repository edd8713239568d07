"""TODO: runtime/contract/."""
