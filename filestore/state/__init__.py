"""A table's state as its files give it: the context every operation opens, the LSM levels.

- `context`: `TableContext` (file IO, schema, snapshots, manifests of one table);
- `levels`: a bucket's live files, their levels and sorted runs; `bucket_file`: one
  bucket's data and changelog files, written and read; `deletion_vectors`: the row
  positions of a data file that are no longer current;
- `tags`: named snapshots that survive expiration; `refs`: which files snapshots and
  tags still reference.

Imports within filestore: errors, format, io.
"""
