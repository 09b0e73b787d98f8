"""The distill stage: shrink history under a token budget (semantic, time, domain and dedup layers)."""

from streams.distill.core import Distilled, distill
from streams.distill.policy import Policy, load_policy
from streams.distill.work import distill_work

__all__ = ["Distilled", "Policy", "distill", "distill_work", "load_policy"]
