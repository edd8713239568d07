"""Log parsing, pure: how bytes become records (:mod:`.framing`), metric definitions (:mod:`.definitions`),
which regex engine matches which record in bounded time (:mod:`.engines`), and records to metric
points (:mod:`.extract`)."""
