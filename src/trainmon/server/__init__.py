"""trainmon server: the JSON API, live updates, /metrics and the console (see :mod:`.app`)."""
