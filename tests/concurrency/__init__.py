"""PostgreSQL-only tests: real server processes, real threads, what the server executed."""
