"""Several processes' Prometheus text as one: how `kairos api`'s workers answer a scrape as a tier.

:class:`TierView` merges the expositions of a changing set of member processes: samples with the
same name and labels are added up (counters, histogram buckets, sums and counts, and the gauges
of members alive now). A member that goes away (a worker that crashed and was replaced) leaves
the counters and histograms it last reported in the view for good, so the tier's counters never
go back: a decrease would read to Prometheus as a counter reset and ``rate()`` would count the
whole remaining total as new. What such a member counted after its last answer is lost, the way
it is for a single process that crashes between scrapes. Every member runs the same code, so
histogram buckets line up.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Kept when a member leaves; gauges describe the present and leave with it.
CUMULATIVE = frozenset({"counter", "histogram", "summary"})

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Family:
    name: str
    documentation: str
    type: str
    samples: dict[SampleKey, float] = field(default_factory=dict)


Families = dict[str, Family]


def parse(text: str) -> Families:
    """One exposition's families by name (ValueError on text that is not Prometheus text)."""
    out: Families = {}
    for metric in text_string_to_metric_families(text):
        family = out.setdefault(metric.name, Family(metric.name, metric.documentation, metric.type))
        for s in metric.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            family.samples[key] = family.samples.get(key, 0.0) + s.value
    return out


def add(into: Families, other: Families, types: frozenset[str] | None = None) -> None:
    """Add ``other``'s samples into ``into`` (only families whose type is in ``types``, if given)."""
    for name, family in other.items():
        if types is not None and family.type not in types:
            continue
        target = into.setdefault(name, Family(family.name, family.documentation, family.type))
        for key, value in family.samples.items():
            target.samples[key] = target.samples.get(key, 0.0) + value


class _Collected:
    """What generate_latest iterates: the merged families as prometheus_client metrics."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            metric = Metric(family.name, family.documentation, family.type)
            metric.samples = [Sample(name, dict(labels), value) for (name, labels), value in family.samples.items()]
            yield metric


def render(families: Families) -> bytes:
    return generate_latest(_Collected(families.values()))


class TierView:
    """The merged exposition of the members alive now plus what departed members had counted."""

    def __init__(self) -> None:
        self._last: dict[str, Families] = {}
        self._departed: Families = {}

    def merge(self, answers: Mapping[str, str | None]) -> bytes:
        """``answers``: every member alive now -> its exposition, or None when it did not answer (its
        last answer stands in)."""
        for member, text in answers.items():
            if text is None:
                continue
            try:
                self._last[member] = parse(text)
            except ValueError:
                continue  # a garbled answer: keep the last good one
        for member in [m for m in self._last if m not in answers]:
            add(self._departed, self._last.pop(member), CUMULATIVE)
        merged: Families = {}
        add(merged, self._departed)
        for member in answers:
            if member in self._last:
                add(merged, self._last[member])
        return render(merged)
