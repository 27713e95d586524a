"""Storage access: whole-file reads and writes on a local disk or an object store.

- `fileio`: `FileIO` (pyarrow file systems: local, S3), publishing a file whole;
- `conditional`: create-if-absent on object stores (a conditional PUT), a commit's atomic
  step there;
- `file_cache`: decoded data files kept in memory for a long-lived writer's lookups.

Imports within filestore: errors.
"""
