"""The `jev` command line. Each command lives in workers/cli/commands/<name>.py with a `register(sub)`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from streams import settings as settings_mod
from streams.security import logsafe
from workers.cli import commands

EPILOG = """Settings come from JEV_* environment variables: `jev config` lists them.
Quick start: `jev demo` runs the whole pipeline on a local broker and embedded ClickHouse."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="jev",
        description="Govern LLM token spend on decision traffic.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"workers.cli.commands.{info.name}").register(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    logsafe.install()
    top = parser()
    args = top.parse_args(argv)
    if not getattr(args, "func", None):
        top.print_help()
        return 2
    try:
        with logsafe.redacted_stderr():
            return args.func(args, settings_mod.load()) or 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
