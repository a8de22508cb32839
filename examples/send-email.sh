#!/bin/sh
# A `kairos worker` command (docs/worker-protocol.md): run once per execution with the payload as JSON on
# stdin. Exit 0 completes the execution and stdout (JSON) is its result; 65 dead-letters it; any other
# exit is retried with backoff. KAIROS_JOB_ID, KAIROS_ATTEMPT, KAIROS_IDEMPOTENCY_KEY and the others say
# which occurrence this is.
payload=$(cat)
echo "job $KAIROS_JOB_ID attempt $KAIROS_ATTEMPT: sending $payload" >&2
printf '{"sent": true, "idempotencyKey": "%s"}\n' "$KAIROS_IDEMPOTENCY_KEY"
