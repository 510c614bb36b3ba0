"""The pages the service serves to browsers: the web console (docs/guide/console.md) and the
API docs.

Both are static files shipped in the package (`static/`), so they need no build step
and no internet. The console is a client of the public `/v1` API only: this package
imports nothing of the web edge, the services or storage (an import-linter contract).
"""
