"""Facts about the machine and the files on it, read without changing anything."""
