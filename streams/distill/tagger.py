"""Rule and keyword tagger (English and Chinese) for history turns, and what the last user turn refers to.

Tags: resolved (a question or request the assistant answered), information (the user supplies facts),
venting (emotion without facts), chit-chat (greetings, thanks), boilerplate (template phrases of
assistants), system, other. Only a turn's head is scanned, so cost does not grow with pasted text.
"""

from __future__ import annotations

import re

HEAD = 240
MARKER = re.compile(r"\bS-(?:\d{8}-)?(\d{3,})\b")

BOILERPLATE = re.compile(
    r"as an ai(?: language model)?|i hope (?:this|that) helps|is there anything else|let me know if you "
    r"(?:have|need)|feel free to (?:ask|reach)|you(?:'|’)re welcome|happy to help|glad (?:i could|to) help|"
    r"i(?:'|’)m sorry,? but i (?:can(?:'|’)?no?t|am unable)|作为(?:一个)?(?:ai|人工智能)|还有什么(?:可以|需要)|"
    r"希望(?:这|以上|对你|对您)[^。]{0,6}(?:帮助|有用)|不客气|很高兴(?:为您|能)?帮"
)
CHITCHAT = re.compile(
    r"(?:\s|[!.,~?？！。，、:)(]|hi|hello|hey|thanks?(?: you)?(?: so much| a lot| very much)?|thx|ty|"
    r"ok(?:ay)?|great|cool|nice|awesome|perfect|good (?:morning|afternoon|evening|night)|bye|lol|haha|"
    r"there|all|everyone|again|friend|buddy|"
    r"你好|您好|谢谢|多谢|好的|嗯|哈哈|再见|早上好|晚安|辛苦了)+"
)
VENTING = re.compile(
    r"\b(?:frustrat|annoy|angry|furious|ridiculous|terrible|horrible|awful|worst|useless|stupid|hate\b|wtf|"
    r"damn|sucks|disappoint|unacceptable|fed up)|!!|！！|[气太垃失烦离无生受](?:死|差|圾|望|谱|语|气|不了)"
)
INFORMATION = re.compile(
    r"\d{3,}|https?://|```|@\w+\.\w|\b(?:(?:my|our) (?:name|order|account|email|phone|address|id|number|"
    r"company|budget|code|data|table|schema|error)\b|here (?:is|are)\b|here(?:'|’)s|below is\b|fyi\b|"
    r"note that\b|for (?:context|reference)\b|additional|update:|correction\b)|"
    r"[补另我订账地电更附以背](?:充|外|的|单号|号|址|话|正|上|下是|景)"
)
PRONOUNS = re.compile(  # point back only in a short follow-up; long prompts use them for their own text
    r"\b(?:it|its|this|that|these|those|them|also|more|same|again|instead|the (?:one|last|following))\b|"
    r"[这那它再](?:个|些)?"
)
EXPLICIT = re.compile(
    r"\b(?:above|previous(?:ly)?|earlier|continue|shorter|longer|rewrite|redo|revise|expand|elaborate|why|how so|"
    r"go on|keep going|proceed|what else|you (?:said|wrote|mentioned|suggested|gave|provided)|"
    r"your (?:answer|response|code|list|example|reply)|the (?:code|list|table|answer|text|story|essay|article|"
    r"example|function|script|email|letter|poem|output|result|response))\b|"
    r"上面|上述|刚才|之前|前面|继续|同样|你说|你的回答|改一下|重写|为什么|然后呢|还有呢"
)
FOLLOW_UP_CHARS = 400
QUOTED = re.compile(r"[\"'“「『]([^\"'”」』\n]{12,})[\"'”」』]")
FIRST = re.compile(
    r"\b(?:first|original|initial) (?:question|answer|response|message|prompt|request)\b|最开始|第一个问题"
)


def tag_turn(role: str, content: str) -> str:
    """The semantic tag of one turn (see the module docstring)."""
    if role == "system":
        return "system"
    short = len(content) <= 300
    if role != "user":
        return "boilerplate" if short and BOILERPLATE.search(content.lower()) else "other"
    head = content[:HEAD].lower()
    if short and BOILERPLATE.search(head):
        return "boilerplate"
    if len(content) <= 80 and CHITCHAT.fullmatch(head):
        return "chit-chat"
    if INFORMATION.search(head):
        return "information"
    if short and VENTING.search(head) and "?" not in head and "？" not in head:
        return "venting"
    return "resolved"


def quoted_lines(text: str, limit: int = 12) -> list[str]:
    """Quoted passages and distinctive lines of `text`, long enough to identify a quotation of an
    earlier turn."""
    out = [m.strip() for m in QUOTED.findall(text[:2000])][:limit]
    for line in text.splitlines():
        if len(out) >= limit:
            break
        line = line.strip().lstrip("> ")
        if len(line) >= 24:
            out.append(line)
    return out


def references(messages: list[dict], last_user: int) -> set[int]:
    """Indices of earlier turns the turn at `last_user` refers to: the previous answer when it points
    back (explicit words such as "above" or "continue", or pronouns in a short follow-up), the first
    exchange when it says so, replies it quotes, and turns whose provenance marker [S-…-NNN] it names."""
    if last_user < 0:
        return set()
    text = messages[last_user].get("content") or ""
    head = text[:HEAD].lower()
    refs: set[int] = set()
    previous = next((i for i in range(last_user - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    follow_up = len(text) <= FOLLOW_UP_CHARS and PRONOUNS.search(head)
    if previous is not None and (follow_up or EXPLICIT.search(head)):
        refs.add(previous)
    if FIRST.search(head):
        refs.update(i for i in (0, 1) if i < last_user)
    if "S-" in text:
        refs.update(index for index in map(int, MARKER.findall(text)) if index < last_user)
    for line in quoted_lines(text):  # a quote of the user's own earlier text is a repeat, not a reference
        refs.update(
            i
            for i in range(last_user)
            if messages[i].get("role") != "user" and line in (messages[i].get("content") or "")
        )
    return refs
