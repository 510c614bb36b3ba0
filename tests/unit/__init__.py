"""Pure logic, no database."""
