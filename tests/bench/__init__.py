"""The benchmark harness still runs (figures are bench/'s business, not the tests')."""
