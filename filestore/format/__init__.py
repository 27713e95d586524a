"""The on-disk format: what each file of a table holds and where it lives.

- `paths`: the table directory's layout; `identifiers`: the one validation of every name
  that becomes a path or a Kafka topic;
- `schema`, `types`, `options`: schema files (fields with stable ids, types, table options);
- `snapshot`: snapshot files and the snapshot manager; `manifest`: manifest lists and
  manifests (Avro); `data_file`: a data file's metadata and its Parquet layout;
- `row_kind`: `_row_kind` values; `bucket`: the bucket hash, shared with the LogStore.

Imports within filestore: errors, io.
"""
