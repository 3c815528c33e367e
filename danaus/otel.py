"""OpenTelemetry for Danaus jobs (``pip install 'danaus[otel]'``): spans and metrics of calls.

``danaus.otel.enable("otlp")`` before the job starts its procs, and every proc
of the job reports:

* a span per call, on each side: ``call <method>`` (kind CLIENT) where it is
  sent, from the send until every answer is in, and ``handle <mesh>.<method>``
  (kind SERVER) where an actor runs it. The caller's span context travels in
  the call's envelope, so the callee's span is its child even on another
  process, and calls made while handling one are children of that handling;
* metrics: ``danaus.calls.sent`` and ``danaus.calls.handled`` (counters, by
  method), ``danaus.call.duration`` and ``danaus.handle.duration`` (histograms,
  seconds), ``danaus.actor.failures`` (counter) and ``danaus.mailbox.depth``
  (a gauge per actor).

Exporters: ``"otlp"`` (OTLP over HTTP; the standard ``OTEL_EXPORTER_OTLP_*``
variables say where), ``"console"`` (each process prints its spans and metrics
to its stdout), or ``"memory"`` (kept in each process, read with `spans_here`;
for tests). Worker processes inherit the choice through their environment
(the settings ``observer`` and ``otel_exporter``: ``DANAUS_OBSERVER``,
``DANAUS_OTEL_EXPORTER``), so procs started before ``enable`` are not
instrumented. With it off, a call pays one attribute test
on each side.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        InMemoryMetricReader,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanProcessor,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"danaus.otel needs OpenTelemetry ({exc}); install it with: pip install 'danaus[otel]'"
    ) from exc

from danaus.core import config
from danaus.core.observer import Observer
from danaus.core.settings import variable

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime
    from danaus.core.wire import Call, PortRef

EXPORTERS = ("otlp", "console", "memory")
METRIC_INTERVAL = 10.0
"""Seconds between metric exports (otlp and console)."""

_process: OtelObserver | None = None
"""This process's observer: one per process, like its OpenTelemetry providers."""


class OtelObserver(Observer):
    """Turns Danaus's observer hooks into OpenTelemetry spans and metrics."""

    def __init__(
        self,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        spans: InMemorySpanExporter | None = None,
        metrics: InMemoryMetricReader | None = None,
        owned: bool = False,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._owned = owned
        """The providers were made here (and are shut down here), not handed in."""
        self.spans = spans
        """Where finished spans are kept, with the ``memory`` exporter."""
        self.metrics = metrics
        self._tracer = tracer_provider.get_tracer("danaus")
        meter = meter_provider.get_meter("danaus")
        self._sent = meter.create_counter("danaus.calls.sent", "{call}", "calls sent, per target")
        self._handled = meter.create_counter("danaus.calls.handled", "{call}", "calls handled")
        self._call_time = meter.create_histogram(
            "danaus.call.duration", "s", "from sending a call until every answer is in"
        )
        self._handle_time = meter.create_histogram(
            "danaus.handle.duration", "s", "time an actor spent running an endpoint"
        )
        self._failures = meter.create_counter("danaus.actor.failures", "{actor}", "actor failures")
        meter.create_observable_gauge(
            "danaus.mailbox.depth", [self._mailboxes], "{message}", "messages waiting per actor"
        )
        self._runtimes: weakref.WeakSet[Runtime] = weakref.WeakSet()
        self._open: dict[tuple[str, int], tuple[Any, float, dict[str, Any]]] = {}
        """Client spans waiting for their port to close: (proc, port) -> span, start, labels."""

    def attach(self, runtime: Runtime) -> None:
        self._runtimes.add(runtime)

    def call_sent(
        self, sender: Instance, actor: str, method: str, count: int, reply: PortRef | None
    ) -> dict[str, str]:
        labels = {"danaus.method": method}
        span = self._tracer.start_span(
            f"call {method}",
            kind=SpanKind.CLIENT,
            attributes={
                "danaus.method": method,
                "danaus.actor": actor,
                "danaus.targets": count,
                "danaus.sender": sender.actor_id,
                "danaus.proc": sender.proc_id,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        self._sent.add(count, labels)
        if reply is None:
            span.end()
        else:
            self._open[(reply.proc, reply.port)] = (span, time.perf_counter(), labels)
        return carrier

    def port_closed(self, runtime: Runtime, port: int) -> None:
        waiting = self._open.pop((runtime.proc_id, port), None)
        if waiting is not None:
            span, started, labels = waiting
            span.end()
            self._call_time.record(time.perf_counter() - started, labels)

    def handling(self, instance: Instance, call: Call) -> Any:
        parent = propagate.extract(call.carried) if call.carried else None
        span = self._tracer.start_span(
            f"handle {instance.name}.{call.method}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "danaus.method": call.method,
                "danaus.mesh": instance.name,
                "danaus.actor": instance.actor_id,
                "danaus.rank": instance.rank.rank,
                "danaus.proc": instance.proc_id,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return span, token, time.perf_counter(), {"danaus.method": call.method}

    def handled(self, token: Any, error: BaseException | None) -> None:
        span, context_token, started, labels = token
        otel_context.detach(context_token)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        self._handled.add(1, labels)
        self._handle_time.record(time.perf_counter() - started, labels)

    def actor_failed(self, instance: Instance, cause: str) -> None:
        self._failures.add(1, {"danaus.mesh": instance.name, "danaus.proc": instance.proc_id})

    def _mailboxes(self, options: CallbackOptions) -> Iterable[Observation]:
        for runtime in list(self._runtimes):
            for actor in runtime.actors():
                yield Observation(
                    actor.mailbox_depth,
                    {"danaus.actor": actor.actor_id, "danaus.mesh": actor.name},
                )

    def shutdown(self) -> None:
        """Flush and stop the providers made for this observer (never ones handed in)."""
        if self._owned:
            self.tracer_provider.shutdown()  # type: ignore[attr-defined]
            self.meter_provider.shutdown()  # type: ignore[attr-defined]


def _made(exporter: str) -> OtelObserver:
    """An observer with providers of its own, exporting to ``exporter``."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; choose one of {', '.join(EXPORTERS)}")
    resource = Resource.create({"service.name": "danaus", "process.pid": os.getpid()})
    spans = InMemorySpanExporter() if exporter == "memory" else None
    memory_reader = InMemoryMetricReader() if exporter == "memory" else None
    processor: SpanProcessor
    reader: MetricReader
    if exporter == "memory":
        processor, reader = SimpleSpanProcessor(spans), memory_reader
    elif exporter == "console":
        processor = BatchSpanProcessor(ConsoleSpanExporter())
        reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), METRIC_INTERVAL * 1000)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(), METRIC_INTERVAL * 1000)
    tracer_provider = SdkTracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    meter_provider = SdkMeterProvider(resource=resource, metric_readers=[reader])
    return OtelObserver(tracer_provider, meter_provider, spans, memory_reader, owned=True)


def observer() -> OtelObserver:
    """This process's observer, made on first use for its ``otel_exporter`` setting.

    What `danaus.core.observer.from_settings` calls in each new proc.
    """
    global _process
    if _process is None:
        _process = _made(config.setting("otel_exporter"))
    return _process


def enable(
    exporter: str = "otlp",
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> OtelObserver:
    """Instrument this process's procs and every proc started from now on.

    ``tracer_provider`` and ``meter_provider``: this process reports to yours
    (the SDK's, set up as you like) instead of providers made for ``exporter``;
    worker processes still use ``exporter``.
    """
    global _process
    disable()
    if tracer_provider is None and meter_provider is None:
        made = _made(exporter)
    else:
        made = OtelObserver(
            tracer_provider or trace.get_tracer_provider(),
            meter_provider or metrics.get_meter_provider(),
        )
    _process = made
    # The processes started from now on read these (their settings' observer and exporter).
    os.environ[variable("observer")] = __name__
    os.environ[variable("otel_exporter")] = exporter
    world = config.installed()
    if world is not None:
        for runtime in world.local_runtimes():
            runtime.observe(made)
    return made


def disable() -> None:
    """Stop instrumenting: this process's procs, and procs started from now on."""
    global _process
    os.environ.pop(variable("observer"), None)
    os.environ.pop(variable("otel_exporter"), None)
    world = config.installed()
    if world is not None:
        for runtime in world.local_runtimes():
            runtime.observe(None)
    if _process is not None:
        _process.shutdown()
        _process = None


def spans_here(runtime: Runtime | None = None) -> list[dict[str, Any]]:
    """The spans this process finished, with the ``memory`` exporter (else none), as dicts.

    Takes a runtime so that ``ProcAgent.probe`` can run it on any proc of a job.
    """
    if _process is None or _process.spans is None:
        return []
    found = []
    for span in _process.spans.get_finished_spans():
        context = span.get_span_context()
        parent = span.parent
        found.append(
            {
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": context.trace_id,
                "span_id": context.span_id,
                "parent_id": parent.span_id if parent is not None else None,
                "attributes": dict(span.attributes or {}),
                "ok": span.status.status_code is not StatusCode.ERROR,
                "pid": os.getpid(),
            }
        )
    return found
