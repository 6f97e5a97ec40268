"""The gateway's Prometheus metrics, on a per-gateway registry (several gateways may live in one process).

Per request the proxy makes one call, `request_done`, which touches label children it has cached (a
`labels()` lookup takes a lock and builds a key; doing it per request showed in the profile). In-flight
counts are not tracked per request at all: a collector reads them from the registry when `/metrics` is
scraped.

Names and labels are the gateway's operator contract; keep them stable.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

#: The content type of `exposition()`.
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _InFlight(Collector):
    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("looplift_gateway_in_flight", "Requests in flight, by version.", labels=["version"])
        for version, n in self._read().items():
            g.add_metric([version], n)
        yield g


class _Replicas(Collector):
    def __init__(self, read: Callable[[], Sequence[Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("looplift_gateway_replica_healthy", "1 when the replica receives requests.",
                               labels=["replica"])
        busy = GaugeMetricFamily("looplift_gateway_replica_in_flight", "Requests in flight, by replica.",
                                 labels=["replica"])
        for r in self._read():
            up.add_metric([r.url], 1 if r.healthy else 0)
            busy.add_metric([r.url], r.in_flight)
        yield up
        yield busy


class GatewayMetrics:
    """Counters and histograms of one gateway; `in_flight` is read at scrape time."""

    def __init__(self, in_flight: Callable[[], Mapping[str, int]],
                 replicas: Optional[Callable[[], Sequence[Any]]] = None) -> None:
        self.registry = r = CollectorRegistry()
        self._requests = Counter(
            "looplift_gateway_requests", "Requests answered, by requested model, serving version, endpoint and status.",
            ["model", "version", "endpoint", "status"], registry=r,
        )
        self._latency = Histogram(
            "looplift_gateway_request_seconds", "Time from request to last byte, by endpoint.",
            ["endpoint"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self._swaps = Counter("looplift_gateway_swaps", "Alias flips, by kind (promote, rollback).", ["kind"], registry=r)
        self._swap_seconds = Histogram(
            "looplift_gateway_swap_seconds", "Time from an admin swap request to the alias flip.", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self._upstream_errors = Counter(
            "looplift_gateway_upstream_errors", "Failures talking to vLLM, by endpoint.", ["endpoint"], registry=r,
        )
        self._retries = Counter(
            "looplift_gateway_retries", "Requests sent to another replica after a transport failure, by endpoint.",
            ["endpoint"], registry=r,
        )
        r.register(_InFlight(in_flight))
        if replicas is not None:
            r.register(_Replicas(replicas))
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request_done(self, model: str, version: str, endpoint: str, status: str,
                     seconds: Optional[float] = None) -> None:
        """One answered request (`model`: the name asked for, `unknown` when it did not exist); `seconds` from
        request to last byte, for requests that reached vLLM."""
        self._child(self._requests, model, version, endpoint, status).inc()
        if seconds is not None:
            self._child(self._latency, endpoint).observe(seconds)

    def upstream_error(self, endpoint: str) -> None:
        """One failure talking to vLLM."""
        self._child(self._upstream_errors, endpoint).inc()

    def retried(self, endpoint: str) -> None:
        """One request re-sent to another replica."""
        self._child(self._retries, endpoint).inc()

    def swapped(self, kind: str, swap_ms: float) -> None:
        """One alias flip (`promote` or `rollback`)."""
        self._child(self._swaps, kind).inc()
        self._swap_seconds.observe(swap_ms / 1000)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
