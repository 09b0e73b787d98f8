"""create_app(settings): the Faust application with every stage agent, returned in a typed handle (JevApp) with
what the agents share, so a process or a test reaches each by name. No side effects at import."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faust

from streams.budgets.book import BudgetBook
from streams.budgets.reserve import prefetch_reserver
from streams.budgets.snapshot import apply_budget_controls, load_book, save_book
from streams.cache.stage import CacheStage
from streams.core import tenants
from streams.core.envelopes import MAX_MESSAGE_BYTES
from streams.core.metrics import observe_switches
from streams.core.outbox import Delivers, Outbox
from streams.core.switches import Controls
from streams.distill.work import Distiller
from streams.idempotency.requests import Requests
from streams.ingest.decode import Admission
from streams.ingest.stage import Ingest
from streams.ingest.templates import Templates
from streams.models import loaded as models
from streams.output import chunks as stream_config
from streams.postprocess.stage import Postprocess
from streams.runtime import kafka_tuning
from streams.runtime import usage_sink as usage_sink
from streams.runtime.agents import batch as batch_agent
from streams.runtime.agents import cache as cache_agent
from streams.runtime.agents import ingest as ingest_agent
from streams.runtime.agents import postprocess as postprocess_agent
from streams.runtime.agents import shadow as shadow_agent
from streams.runtime.agents.cache import CacheStateLog
from streams.runtime.consumer import BatchConsumer, serve
from streams.runtime.control import ControlReader
from streams.runtime.leases import BudgetOwner, LeaseClient
from streams.runtime.local import LocalAnswers
from streams.runtime.seen_log import RequestsSeenLog
from streams.runtime.sender import Sender
from streams.runtime.topics import KeyPartitionedTable, Topics
from streams.runtime.usage_spill import durable_sink
from streams.scoring import rules
from streams.security import signing
from streams.settings import Settings
from streams.shadow.guard import Guard
from streams.shadow.sample import Sampler
from streams.shadow.verdict import ShadowJoin
from streams.text import tokens
from streams.usage.texts import request_texts


@dataclass
class JevApp:
    """What create_app wires: the Faust app (`faust`, to run) and the state its agents share, each handed to the
    agents that use it. `ingest`, `usage` and `verdicts` are the BatchConsumers of those stages (usage and
    verdicts only where this process sinks usage); `cache_state` the cache-state log where it is on."""

    faust: faust.App
    topics: Topics
    sender: Delivers
    controls: Controls
    budgets: BudgetBook
    requests: Requests
    requests_seen: RequestsSeenLog
    postprocess: Postprocess
    guard: Guard
    ingest: BatchConsumer
    usage: BatchConsumer | None
    verdicts: BatchConsumer | None
    cache_state: CacheStateLog | None


def create_app(
    settings: Settings, known_types: set[str] | None = None, sink=None, sender: Delivers | None = None
) -> JevApp:
    """The stream-processing app. `sink` (anything with insert(events)) defaults to durable_sink(settings),
    opened when the first usage arrives; `sender` to a Sender on the app's broker, through which every stage
    sends."""
    kafka_tuning.install()
    signing.configure(settings)
    tokens.configure(settings.tokenizers)
    models.configure(settings.model_threads)
    app = faust.App(
        settings.app_id,
        broker=settings.broker,
        store="memory://",
        web_enabled=False,
        datadir=str(Path(settings.data_dir) / "faust"),
        topic_partitions=settings.partitions,
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        producer_max_batch_size=1,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=True,
    )
    if sender is None:
        sender = serve(app, Sender(settings.bootstrap, settings.partitions))
    topics = Topics(app, settings.partitions, sender)
    # The L1 exact cache, keyed by cache_key as scored is. Its values are Entry.dumps(), kept as bytes (a changelog
    # written before, as JSON dicts, reads back the same).
    l1 = app.tables.add(
        KeyPartitionedTable(
            app,
            name="l1_cache",
            default=None,
            beacon=app.tables.beacon,
            partitions=settings.partitions,
            value_type=bytes,
        )
    )
    state = {"sink": sink}
    controls = Controls()
    budget_file = Path(settings.data_dir) / "budgets.json"
    book = load_book(budget_file)
    controls.listeners.append(apply_budget_controls(book))
    controls.listeners.append(lambda _: observe_switches(controls.switches))
    observe_switches(controls.switches)
    admission = Admission(
        settings.max_record_bytes,
        settings.default_model,
        frozenset(known_types or ()),
        Templates.from_dir(),
        stream_config.load(settings.stream_config),
        tenants.admitted(settings.tenants),
        settings.max_field_bytes,
        tenants.load_keys(settings.tenant_keys),
    )
    saved = {"revision": book.revision}

    @app.timer(interval=1.0)
    async def save_budgets():
        book.expire(settings.budget_reservation_ttl_s)
        if book.revision != saved["revision"]:
            saved["revision"] = book.revision
            save_book(book, budget_file)

    @app.task
    async def follow_control():
        await ControlReader(
            settings.bootstrap,
            controls,
            keep=Path(settings.data_dir) / "control.json",
            check_s=settings.control_check_s,
            max_skew_s=settings.control_max_skew_s,
        ).run()

    def get_sink():
        if state["sink"] is None:
            state["sink"] = durable_sink(settings)
            controls.listeners.append(state["sink"].on_control)
        return state["sink"]

    def get_texts():
        """The opt-in raw-text store (JEV_RAW_TEXT_DAYS), beside the usage tables; None when off."""
        if "texts" not in state:
            state["texts"] = request_texts(settings, get_sink().inner.client) if settings.raw_text_days else None
        return state["texts"]

    if hasattr(sink, "on_control"):
        controls.listeners.append(sink.on_control)

    leases = None
    if settings.budget_leases:

        async def send(topic, values):  # the lease agents' events (topic by full name), each to its partition
            short = topic.split(".")[1]
            await sender.deliver(Outbox(placed=[(short, partition, value) for partition, value in values]))

        book.leased_tokens = True
        leases = LeaseClient(
            settings.bootstrap,
            settings.app_id,
            settings.partitions,
            book,
            send,
            settings.budget_lease_share,
            settings.budget_lease_s,
        )
        owner = BudgetOwner(
            settings.bootstrap, settings.app_id, book, send, settings.budget_lease_s, settings.budget_reservation_ttl_s
        )

        @app.task
        async def own_budgets():
            await owner.run()

        @app.task
        async def hold_leases():
            await leases.run()

    cache = CacheStage(l1, settings)
    controls.listeners.append(cache.on_control)
    cache.reserve = prefetch_reserver(book, leases)
    requests = Requests(settings.idempotency_max)
    seen = RequestsSeenLog(settings.bootstrap, requests)
    shadow = ShadowJoin(settings.shadow_text_agree, cache.learn)
    postprocess = Postprocess(settings, cache, controls, book, shadow, requests, leases)
    rule_list = rules.load(settings.rules)
    distiller = Distiller(settings.distill_policies)
    controls.listeners.append(distiller.on_control)
    local = LocalAnswers(app, topics, settings.partitions, cache, controls, postprocess, rule_list)
    sampler = Sampler(settings.shadow_rate, admission.stream_config)
    stage = Ingest(settings, admission, book, controls, get_texts, distiller, local, sender, requests, sampler, leases)
    ingest = ingest_agent.register(app, topics, settings, stage, sender, seen)
    cache_state = cache_agent.register(app, topics, settings, cache, controls, postprocess, rule_list, sender, seen)
    postprocess_agent.register(app, topics, settings, postprocess, sender, seen)
    usage = usage_sink.register(app, topics, settings, get_sink, sender) if settings.usage_sink else None
    batch_agent.register(app, settings, sender, book=book)
    guard = shadow_agent.build_guard(settings, cache, distiller)
    controls.listeners.append(guard.on_control)
    verdicts = (
        shadow_agent.register(  # where ClickHouse is: the verdicts are stored and judged there
            app, topics, settings, guard, lambda: getattr(getattr(get_sink(), "inner", None), "client", None), sender
        )
        if settings.usage_sink
        else None
    )
    return JevApp(
        faust=app,
        topics=topics,
        sender=sender,
        controls=controls,
        budgets=book,
        requests=requests,
        requests_seen=seen,
        postprocess=postprocess,
        guard=guard,
        ingest=ingest,
        usage=usage,
        verdicts=verdicts,
        cache_state=cache_state,
    )
