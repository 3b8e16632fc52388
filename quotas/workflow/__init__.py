"""The self-service workflow: requests that tenant members submit and admins decide, and what follows a decision.

One module per job:

- ``errors``: the refusals (``WorkflowError`` and its kinds, with the code a client branches on);
- ``transitions``: what every transition does (the conditional move, who may decide, which tenant);
- ``quota_requests``: quota requests (submit, withdraw, approve, reject) and settling them after pushes;
- ``boosts``: quota requests with an expiry, ended by ``expire_boosts``;
- ``grouped``: the life cycle shared by the requests decided on their own row;
- ``subscription_requests``: client-metrics subscription requests;
- ``plan_requests``: grouped requests of plans (quotas as code).

The capacity check an approver decides on is ``quotas.models.capacity``.
"""
