"""Tests of the HTTP edge that need no particular database."""
