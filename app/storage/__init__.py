"""Storage: the tables, the shared SQL, and what differs per database."""
