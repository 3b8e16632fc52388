"""The project's API toolkit, which every app's API uses (as NetBox keeps its own in ``netbox/api/``).

``errors``: the one error shape (``ApiError``, ``ErrorSerializer``, DRF's exceptions re-shaped, the schema's error
responses); ``pagination``: cursor pagination; ``links``: OpenAPI links from a create to what it created; ``users``:
the current user's endpoint. It imports nothing of the apps (a layer of its own in the import contracts), so the
apps' APIs sit above it; the mapping of the quota domain's own errors onto the shape is the project's
(``portal.errors.api_exception_handler``).
"""
