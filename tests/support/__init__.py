"""What the tests share besides their fixtures (tests/conftest.py): helpers, servers,
locks from outside, push endpoints and receivers."""
