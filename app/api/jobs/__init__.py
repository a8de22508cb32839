"""/v1/jobs: submit (single and batched), read, change and run jobs.

controller: the routes (POST /v1/jobs is answered by create_route, in front of the router); service:
what each does, one transaction each; submit: the group-committing writer every submit goes through;
schemas: the bodies; large_payloads: payloads kept in the object store.
"""
