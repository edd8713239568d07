"""From a job's pipes to stored log records and metric points.

Two kinds of threads, so that monitoring never holds the job back:

- the pipes are only read (:mod:`.pipes`): by the job's spooler process (:class:`~.pipes.Spooler`,
  :mod:`.spooler`), which appends each chunk the job wrote to the pipe's spool file (:mod:`.spool`),
  framed with its read time, and notes it for the ingestor; or, where that process cannot run, by
  a :class:`~.pipes.PipeReader` thread per pipe that does the same. Neither waits on the store,
  the terminal or the extractor, so the job's writes never block on trainmon. When the
  spool cannot be written (a full disk), chunks are kept in memory, up to ``MEMORY_CAP_BYTES``
  for the whole job; past that they are counted (bytes, records, points) and dropped, so memory
  stays bounded and the loss is recorded on the job, never silent.
- one :class:`~.ingestor.Ingestor` per job cuts the chunks into records, extracts points, echoes to the
  terminal and writes batches to the store, as fast as the store takes them. When the store
  refuses (a server down, a lock, a full disk), the batch is kept and written again with
  backoff, and the ingestor takes no new chunks meanwhile: the backlog waits in the spool, on
  disk. Each batch records how far each spool was consumed (``Batch.spools``), in the same
  transaction, so whoever ingests a spool left by a dead supervisor starts where it stopped
  (:mod:`.recovery`).

A record's timestamp is the wall-clock time (ms) of the read that completed it.

The ingestor's parts: :mod:`.records` cuts records and echoes them, :mod:`.loss` counts what was
dropped, :mod:`.writer` writes batches (:class:`~.writer.BatchWriter`).
"""
