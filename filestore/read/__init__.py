"""Reading a table: scans planned from manifests, merge-on-read, changelogs, lookups.

- `scan`: which files a read needs, grouped into splits; `split`: a split's files
  turned into its bucket's current rows; `merge`: the merge engines;
- `changes`: the rows that changed between two snapshots; `lookup`: the exact changes new
  rows make to a bucket (the lookup changelog producer).

Imports within filestore: errors, format, state, threads.
"""
