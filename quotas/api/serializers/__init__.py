"""Serializers of the quota API, one module per resource (as NetBox splits its apps' ``api/serializers_/``).

``fields`` holds the limits and value fields every resource shares; ``clusters``, ``client_quotas`` (Kafka's
Describe/AlterClientQuotas and the effective quota), ``configs``, ``tenants``, ``requests``, ``audit``, ``pushes``
(pushes, drift, re-applying), ``groups`` (group quotas) and ``exempt_principals`` hold each resource's own. A package of
modules rather than ``serializers_<resource>.py`` files beside the views, so the API's directory lists jobs, not file
variants; and this module re-exports nothing, so every importer names the resource module it depends on and the import
graph (``lint-imports``) shows it.

Request serializers only shape the JSON; Kafka's rules (entity types, keys, values) are
judged by the engine in ``quotas.models.quotas``, so in AlterClientQuotas (Kafka's own API, whose
values are doubles) a value such as ``"100"`` reaches the engine untouched and is refused there with
Kafka's message, never silently coerced. Quota requests and previews are written by people: their
value may also be text in a form the key takes (``1.5 MiB/s``, ``1536 KiB/s``, ``1572864``; parsed by
``engine.units``), and other text is refused naming the accepted forms.
"""
