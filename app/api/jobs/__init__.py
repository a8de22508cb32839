"""/v1/jobs: submit (single, batched, and the single submit's fast path), read, change and run jobs.

controller: the routes; service: what each does, one transaction each; submit: the group-committing
writer every submit goes through; schemas: the bodies; large_payloads: payloads kept in the object store.
"""
