"""Personal access tokens for the API: what scripts and ``quotactl`` sign in with.

A token is shown once when it is made and stored only as its SHA-256 digest; it acts either within one tenant
(as a member of that tenant only, whatever else its owner may do) or, for admins and auditors, with all of the
owner's rights. Admins revoke any token; owners revoke their own. ``Authorization: Bearer <token>``.
"""
