"""The versioned cleanup config (patterns.yaml), compiled once per file."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from streams.output.sensitive import SensitiveScanner

BUNDLED = Path(__file__).with_name("patterns.yaml")
FENCE_MODES = ("keep", "extract")
# blanks, tildes and emoji a closer may end with ("Happy coding! 🚀", "希望对您有帮助！😊", "随时找我哦～")
EMOJI_TAIL = r"[\s~\uff5e\u2600-\u27bf\ufe0f\u200d\U0001f300-\U0001faff]*"


@dataclass(frozen=True)
class Patterns:
    version: str
    interjection: re.Pattern
    greeting: re.Pattern
    lead_in: re.Pattern
    restated_request: re.Pattern
    filler: re.Pattern
    closer: re.Pattern
    debug_line: re.Pattern
    debug_block: re.Pattern
    fences: str
    unwrap_languages: frozenset[str]
    truncation_marker: str
    scanner: SensitiveScanner


def _alternation(
    regexes: list[str], where: str, path: Path, *, before: str = "", after: str = "", flags: int = 0
) -> re.Pattern:
    if not regexes:
        return re.compile(r"(?!)")  # matches nothing
    for regex in regexes:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(f"{path}: bad regex under {where}: {regex!r} ({exc}); fix or remove it") from None
    return re.compile(before + "(?:" + "|".join(f"(?:{r})" for r in regexes) + ")" + after, re.IGNORECASE | flags)


def _dictionary_words(path: Path) -> list[str]:
    if not path.exists():
        raise FileNotFoundError(
            f"sensitive-word dictionary {path} not found; fix `sensitive.dictionaries` "
            f"in the patterns file (paths are relative to it)"
        )
    if path.suffix in (".yaml", ".yml"):
        return [str(w) for w in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("words", [])]
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> Patterns:
    """Compile the patterns file at `path` (empty: the bundled one)."""
    file = Path(path) if path else BUNDLED
    raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    if "version" not in raw:
        raise ValueError(f"{file}: add a `version` field (cached answers are keyed by it)")
    fences = raw.get("fences", "keep")
    if fences not in FENCE_MODES:
        raise ValueError(f"{file}: fences is {fences!r}; use one of {', '.join(FENCE_MODES)}")
    preamble, debug = raw.get("preamble", {}), raw.get("debug", {})
    words = [w for d in raw.get("sensitive", {}).get("dictionaries", []) for w in _dictionary_words(file.parent / d)]
    return Patterns(
        version=str(raw["version"]),
        interjection=_alternation(
            preamble.get("interjections", []), "preamble.interjections", file, before=r"\s*", after=r"[ \t]*"
        ),
        greeting=_alternation(
            preamble.get("greetings", []), "preamble.greetings", file, before=r"\s*", after=r"[ \t]*"
        ),
        lead_in=_alternation(preamble.get("lead_ins", []), "preamble.lead_ins", file, before=r"\s*", after=r"[ \t]*\n"),
        restated_request=_alternation(
            preamble.get("restated_requests", []), "preamble.restated_requests", file, before=r"\s*", after=r"[ \t]*"
        ),
        filler=_alternation(preamble.get("fillers", []), "preamble.fillers", file, before=r"\s*", after=r"[ \t]*"),
        closer=_alternation(raw.get("closers", []), "closers", file, after=EMOJI_TAIL),
        debug_line=_alternation(
            debug.get("lines", []), "debug.lines", file, before="^", after=r"[ \t]*(?:\n|\Z)", flags=re.MULTILINE
        ),
        debug_block=_alternation(debug.get("blocks", []), "debug.blocks", file),
        fences=fences,
        unwrap_languages=frozenset(str(x).lower() for x in raw.get("unwrap_languages", [])),
        truncation_marker=str(raw.get("truncation_marker", "[…]")),
        scanner=SensitiveScanner(words),
    )


def resolve(config: Patterns | str | None) -> Patterns:
    """A Patterns object, a path to a patterns file, or None for the bundled file."""
    return config if isinstance(config, Patterns) else load(config or "")
