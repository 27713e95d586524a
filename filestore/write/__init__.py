"""Writing a table: rows validated and numbered, buffered, flushed as level-0 runs.

- `table_write`: `TableWrite` (sequence numbers, the memory buffer, prepare and commit);
- `_validate`, `_memtable`, `_file_writer`: checking rows, buffering them, writing files;
- `_stall`: a bucket at `num-sorted-run.stop-trigger` runs compacted inline.

Imports within filestore: commit, errors, format, maintenance, read, state, threads.
"""
