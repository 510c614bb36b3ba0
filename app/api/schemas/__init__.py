"""The HTTP contract as pydantic models: one module per module of app/api/routes/ (its
requests, answers and parameters), `fields` for what several share, `problems` for errors.

Schemas import the domain and nothing of the services or storage (an import-linter
contract): the bounds they enforce are the domain's (app/domain/limits.py and beside each
domain type).
"""
