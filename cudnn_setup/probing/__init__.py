"""The parent's side of the child protocol: starting a probe (probes/) in a child with a time
limit and reading its one answer line, field by field, into records."""
