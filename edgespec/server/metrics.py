"""Prometheus counters for `GET /metrics` (one registry per app, so tests can count)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from edgespec.api import GenerationStats


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "edgespec_requests", "HTTP requests answered", ["endpoint", "status"], registry=r
        )
        self.generated = Counter("edgespec_tokens_generated", "Tokens generated", registry=r)
        self.drafted = Counter(
            "edgespec_tokens_drafted", "Draft tokens proposed", ["drafter"], registry=r
        )
        self.accepted = Counter(
            "edgespec_tokens_accepted", "Draft tokens accepted", ["drafter"], registry=r
        )
        self.decode_seconds = Counter(
            "edgespec_decode_seconds", "Time spent generating", registry=r
        )
        self.queue = Gauge("edgespec_queue_length", "Requests waiting for their turn", registry=r)
        self.errors = Counter("edgespec_errors", "Requests that failed", ["type"], registry=r)
        # Per lane (slot), summed over rounds: divided by the rounds, the K chosen, the pass's
        # tokens (every lane's) and the wait for it.
        lane = ["lane"]
        self.rounds = Counter("edgespec_lane_rounds", "Draft-verify rounds", lane, registry=r)
        self.k_chosen = Counter("edgespec_lane_k_chosen", "Draft lengths chosen", lane, registry=r)
        self.pass_tokens = Counter(
            "edgespec_lane_pass_tokens", "Tokens of the passes that verified", lane, registry=r
        )
        self.pass_wait = Counter(
            "edgespec_lane_pass_wait_seconds", "Asking for a pass to its rows", lane, registry=r
        )

    def generation(self, stats: GenerationStats) -> None:
        self.generated.inc(stats.generated)
        self.decode_seconds.inc(stats.total_s)
        for name, counts in stats.by_drafter.items():
            self.drafted.labels(name).inc(counts.drafted)
            self.accepted.labels(name).inc(counts.accepted)
        lane = str(stats.lane)
        self.rounds.labels(lane).inc(stats.rounds)
        self.k_chosen.labels(lane).inc(stats.k_chosen)
        self.pass_tokens.labels(lane).inc(stats.pass_tokens)
        self.pass_wait.labels(lane).inc(stats.pass_s)

    def text(self) -> bytes:
        return generate_latest(self.registry)
