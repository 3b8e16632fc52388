"""Views of the quota API, one module per resource (as ``quotas.api.serializers``; see its docstring for why).

``base`` holds what every view shares (error responses, memory-bounded lists, the cluster of the URL); who may call
what is ``quotas.api.permissions``, and the lenient JSON parser ``quotas.api.parsers``. This module re-exports
nothing: ``quotas.api.urls`` and other importers name the resource module.

Clusters: reads are open to any authenticated caller; writes (AlterClientQuotas, creating and
updating clusters) are for admins (staff or the quota-admins group; never an auditor). Quota values
are scoped like requests: a tenant member describes only the entities its tenants own (and the
``<default>`` ones), and asks for the effective quota of its own principals and client-ids only.
Tenants, quota requests and the audit trail are scoped: admins and auditors see everything, a tenant
member sees its tenants' rows only (others' rows answer NOT_FOUND, so their existence does not leak).
Group quotas are scoped like tenants (a member sees its tenants' groups; admins change them); a cluster's exempt
principals are read by everyone authenticated and changed by admins. Push status and drift are operational: admins and
auditors read them (a member sees its own request's pushes on the request), and only admins re-apply desired state to a
broker.
"""
