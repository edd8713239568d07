"""TODO: runtime/launchers/."""
