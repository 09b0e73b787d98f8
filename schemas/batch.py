"""Records of async batch jobs: members in, merged calls between the aggregator and the splitter, results out.

Token counts are exact counts in the job's accounting model (settings.default_model), so quotas, merged and
individual totals compare like with like whatever backend generated the text.
"""

from __future__ import annotations

from typing import Any

from schemas.records import Record


class BatchMember(Record):
    """One line of a job file: a member to report on, with its template, kind and token quota."""

    job: str
    member: str
    kind: str
    template: str
    quota_tokens: int
    variables: dict[str, Any] = {}
    tenant: str = "batch"
    service: str = "batch_jobs"
    business_line: str = ""
    submitted_at: float = 0.0


class MemberShare(Record):
    """A member's place in a merged call: its rendered block, what was trimmed, its budgets."""

    member: BatchMember
    block: str
    block_tokens: int
    output_budget: int
    individual_tokens: int  # its own call: shared instructions + block, plus its output budget
    trimmed: list[str] = []
    tag: str = "m1"  # its label in the prompt and the answers (`### member m3`, `=== m3 ===`): ids may hold anything


class MergedCall(Record):
    """One generation for several members of the same job and template (aggregator → splitter)."""

    call_id: str
    job: str
    template: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    shares: list[MemberShare]
    text: str = ""
    output_tokens: int = 0
    generator: str = ""
    label: str = ""
    latency_ms: float = 0.0
    error: str = ""
    sent: str = "merged"  # merged | individual (merging would not have paid for its group)
    note: str = ""  # why it was sent individually


class BatchResult(Record):
    """The outcome for one member: its report, or an explicit failure with the reason."""

    job: str
    member: str
    kind: str
    template: str
    status: str  # ok | failed
    call_id: str
    text: str = ""
    sections: dict[str, str] = {}
    label: str = ""
    generator: str = ""
    retried: bool = False
    input_tokens: int = 0  # its block plus its share of the shared instructions, over every call it took
    output_tokens: int = 0
    reserved_tokens: int = 0  # input plus max output tokens of every call it took (its share of a merged one)
    quota_tokens: int = 0
    output_budget: int = 0
    quota_used: int = 0  # block + output of the call that produced the result
    tenant: str = ""  # the member's: the Sender also sends the result to that tenant's reply topic
    individual_tokens: int = 0
    trimmed: list[str] = []
    cost: float = 0.0
    error: str = ""
    sent: str = "merged"  # merged | individual: how the call that produced it was sent
    note: str = ""  # why it was sent individually
