"""TierView: the API tier's workers' Prometheus text merged into one, counters never going back."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.observability.prometheus import TierView


def exposition(requests: float, inflight: float, le_1: float) -> str:
    return f"""# HELP kairos_requests_total Requests
# TYPE kairos_requests_total counter
kairos_requests_total{{route="/v1/jobs"}} {requests}
# HELP kairos_inflight In flight
# TYPE kairos_inflight gauge
kairos_inflight {inflight}
# HELP kairos_lag_seconds Lag
# TYPE kairos_lag_seconds histogram
kairos_lag_seconds_bucket{{le="1.0"}} {le_1}
kairos_lag_seconds_bucket{{le="+Inf"}} {requests}
kairos_lag_seconds_count {requests}
kairos_lag_seconds_sum {requests * 0.5}
"""


def values(text: bytes) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
    }


def test_members_add_up_and_a_departed_member_keeps_its_counts_but_not_its_gauges() -> None:
    view = TierView()
    merged = values(view.merge({"1": exposition(3, 1, 2), "2": exposition(4, 2, 4)}))
    assert merged[("kairos_requests_total", (("route", "/v1/jobs"),))] == 7
    assert merged[("kairos_inflight", ())] == 3
    assert merged[("kairos_lag_seconds_bucket", (("le", "1.0"),))] == 6
    assert merged[("kairos_lag_seconds_count", ())] == 7

    # "2" did not answer this time: its last answer stands in.
    merged = values(view.merge({"1": exposition(5, 0, 3), "2": None}))
    assert merged[("kairos_requests_total", (("route", "/v1/jobs"),))] == 9
    assert merged[("kairos_inflight", ())] == 2

    # "2" died and "3" replaced it: 2's counters and buckets stay, its gauge goes.
    merged = values(view.merge({"1": exposition(5, 0, 3), "3": exposition(1, 1, 1)}))
    assert merged[("kairos_requests_total", (("route", "/v1/jobs"),))] == 10
    assert merged[("kairos_lag_seconds_bucket", (("le", "1.0"),))] == 8
    assert merged[("kairos_lag_seconds_sum", ())] == 5.0
    assert merged[("kairos_inflight", ())] == 1


def test_a_garbled_answer_keeps_the_last_good_one() -> None:
    view = TierView()
    view.merge({"1": exposition(2, 0, 2)})
    merged = values(view.merge({"1": "kairos_requests_total{route= 3 garbage"}))
    assert merged[("kairos_requests_total", (("route", "/v1/jobs"),))] == 2
