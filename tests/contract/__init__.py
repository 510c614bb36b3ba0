"""The contract suite: every test runs on every database."""
