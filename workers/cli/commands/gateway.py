"""`jev gateway`: the OpenAI-compatible HTTP gateway in front of a running pipeline, and its API keys
(`jev gateway keys add|revoke|list`)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

DESCRIPTION = """Serves Jev over HTTP, for applications written against the OpenAI API:

  POST /v1/chat/completions   OpenAI chat completions; "stream": true answers as server-sent events,
                              paced like every streamed answer; stream_options.include_usage adds usage
  GET  /v1/models             the models generate requests are answered by (JEV_GENERATOR)
  POST /v1/decisions          Jev-native: state + candidates in; action_id, ranking, tier, tokens out
  GET  /health                200 while the gateway serves

Every call becomes a request on JEV_BROKER's requests topic, so budgets, contracts, caches, cleanup and
metering apply as to any Kafka producer: a pipeline must be running there (`jev up`, or `jev broker`,
`jev worker stream`, `jev worker score`). The tenant comes from the API key, never from the body.
Optional body fields beside OpenAI's: decision_type (default customer_service), session_id, service,
question_type, client (web | mobile); an Idempotency-Key header makes a retry return the first answer."""

EXAMPLE = """example:
  jev gateway keys add --tenant acme          # prints the key on its last line
  jev gateway --port 8080 &
  curl -N http://127.0.0.1:8080/v1/chat/completions -H "Authorization: Bearer $KEY" \\
       -H 'Content-Type: application/json' \\
       -d '{"model": "extractive", "stream": true,
            "messages": [{"role": "user", "content": "Where is my parcel?"}]}'
  # Python: OpenAI(base_url="http://127.0.0.1:8080/v1", api_key=KEY).chat.completions.create(...)"""


def register(sub) -> None:
    p = sub.add_parser(
        "gateway",
        help="serve the OpenAI-compatible HTTP gateway; manage its API keys",
        description=DESCRIPTION,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 = every interface)")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080)")
    p.set_defaults(func=serve)
    keys = p.add_subparsers(dest="gateway_command", metavar="keys").add_parser(
        "keys",
        help="add, revoke or list API keys (only a hash of each is stored; a running gateway sees changes at once)",
        description="API keys map to tenants. Stored as hashes in JEV_GATEWAY_KEYS_FILE "
        "(default <data_dir>/gateway_keys.json); a running gateway re-reads the file when it changes.",
    )
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="create a key for a tenant and print it (its last line)")
    add.add_argument("--tenant", required=True, help="the tenant every request with this key spends for")
    add.set_defaults(func=keys_add)
    revoke = actions.add_parser("revoke", help="revoke a key, given the key or its id from `keys list`")
    revoke.add_argument("key", help="the key itself, or its id (the first hex digits `keys list` shows)")
    revoke.set_defaults(func=keys_revoke)
    listed = actions.add_parser("list", help="list key ids, their tenants and when they were made (never the keys)")
    listed.set_defaults(func=keys_list)


def keys_add(args, settings) -> int:
    from streams.core.tenants import BadTenant
    from workers.processes.gateway import keys_for

    store = keys_for(settings)
    try:
        key_id, key = store.add(args.tenant)
    except BadTenant as exc:
        print(f"jev gateway keys add: {exc}", file=sys.stderr)
        return 2
    print(f"key {key_id} for tenant {store.tenant(key)} (stored as a hash in {store.path}; shown once):")
    print(key)
    return 0


def keys_revoke(args, settings) -> int:
    from workers.processes.gateway import keys_for

    gone = keys_for(settings).revoke(args.key)
    if not gone:
        print("jev gateway keys revoke: no such key or key id (see `jev gateway keys list`)", file=sys.stderr)
        return 1
    print(f"revoked {', '.join(gone)}")
    return 0


def keys_list(args, settings) -> int:
    from workers.processes.gateway import keys_for

    for entry in keys_for(settings).listed():
        made = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry["created"]))
        print(f"{entry['id']}  {entry['tenant']}  {made} UTC")
    return 0


def serve(args, settings) -> int:
    from workers.processes.gateway import keys_for, start

    async def main() -> None:
        runner = await start(settings, host=args.host, port=args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(
            f"jev gateway: serving http://{args.host}:{args.port}/v1 for the pipeline on {settings.bootstrap} "
            f"({len(keys_for(settings).listed())} keys); Ctrl-C stops it",
            flush=True,
        )
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
    return 0
