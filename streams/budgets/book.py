"""Hard and soft token/cost budgets per scope and period, with atomic reservations.

A request reserves its worst case against every budget of its scopes before any model work and settles with the
actuals afterwards. `reserve` is one synchronous check-and-update under a lock, so concurrent tasks or threads
never overshoot a hard budget. This is one process's view: with several stage processes, hard token limits are
enforced by leases (streams.budgets.lease_owner), and the book keeps soft budgets, alerts and cost limits.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field

from schemas.records import Alert, Control, Request

PERIODS = {"day": "%Y-%m-%d", "month": "%Y-%m"}
SCOPE_KINDS = ("all", "tenant", "service", "decision_type", "business_line", "user", "session")
POLICIES = ("reject", "degrade")
MAX_TOKENS = 10**12  # per period; above it a budget is a typo, not a limit
MAX_COST = 10**9  # USD per period
FIELDS = {"period", "hard_tokens", "soft_tokens", "hard_cost", "soft_cost", "alert_ratios", "policy", "degrade_to"}


class BudgetError(ValueError):
    """A budget control record that cannot be applied; the message names the fix."""


@dataclass(frozen=True)
class Budget:
    scope: str  # kind:name, e.g. tenant:acme
    period: str = "day"
    hard_tokens: int | None = None
    soft_tokens: int | None = None
    hard_cost: float | None = None
    soft_cost: float | None = None
    alert_ratios: tuple[float, ...] = (1.0, 1.2)  # of the soft limit
    policy: str = "reject"  # over the hard limit: reject, or degrade to `degrade_to`
    degrade_to: str = "rules"  # a cheaper tier or model

    @property
    def key(self) -> str:
        return f"{self.scope}@{self.period}"


@dataclass
class Usage:
    window: str
    used_tokens: int = 0
    used_cost: float = 0.0
    reserved_tokens: int = 0
    reserved_cost: float = 0.0
    fired: list[str] = field(default_factory=list)  # soft alerts already raised in this window


@dataclass(frozen=True)
class Reservation:
    id: str
    keys: tuple[str, ...]  # budget keys held
    windows: tuple[str, ...]
    tokens: int
    cost: float
    created: float
    alerts: tuple[Alert, ...] = ()


@dataclass(frozen=True)
class Refused:
    reason: str
    budget: str
    policy: str
    degrade_to: str
    alerts: tuple[Alert, ...] = ()


def request_scopes(request: Request) -> list[str]:
    pairs = (
        ("tenant", request.tenant),
        ("service", request.service),
        ("decision_type", request.decision_type),
        ("business_line", request.business_line),
        ("user", request.user_id),
        ("session", request.session_id),
    )
    return ["all:*"] + [f"{kind}:{name}" for kind, name in pairs if name]


def limit(value, name: str, key: str, cap: float, integer: bool):
    if value is None:
        return None
    ok_type = isinstance(value, (int, float)) and (not integer or float(value).is_integer())
    if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value < 0:
        raise BudgetError(
            f"budget {key}: {name}={value!r} must be a non-negative "
            f"{'integer' if integer else 'number'} (omit it for no limit)"
        )
    if value > cap:
        raise BudgetError(f"budget {key}: {name}={value!r} is absurd (over {cap:g} per period); check the units")
    return int(value) if integer else float(value)


def parse_budget(key: str, value: dict) -> Budget:
    scope, _, period = key.partition("@")
    kind, sep, name = scope.partition(":")
    if kind not in SCOPE_KINDS or not sep or not name:
        raise BudgetError(
            f"budget key {key!r}: expected KIND:NAME[@day|@month] with KIND one of "
            f"{', '.join(SCOPE_KINDS)} (all:* for a global budget)"
        )
    if not isinstance(value, dict) or set(value) - FIELDS:
        raise BudgetError(f"budget {key}: value must be a mapping of {', '.join(sorted(FIELDS))}; got {value!r}")
    period = period or value.get("period", "day")
    if period not in PERIODS or value.get("period", period) != period:
        raise BudgetError(f"budget {key}: period must be day or month (key suffix and value must agree)")
    ratios = value.get("alert_ratios", (1.0, 1.2))
    ratios = tuple(ratios) if isinstance(ratios, (list, tuple)) else (ratios,)
    if not all(isinstance(r, (int, float)) and 0 < r <= 10 for r in ratios):
        raise BudgetError(f"budget {key}: alert_ratios {ratios!r} must be numbers in (0, 10], e.g. [1.0, 1.2]")
    b = Budget(
        scope,
        period,
        limit(value.get("hard_tokens"), "hard_tokens", key, MAX_TOKENS, True),
        limit(value.get("soft_tokens"), "soft_tokens", key, MAX_TOKENS, True),
        limit(value.get("hard_cost"), "hard_cost", key, MAX_COST, False),
        limit(value.get("soft_cost"), "soft_cost", key, MAX_COST, False),
        tuple(sorted(ratios)),
        value.get("policy", "reject"),
        str(value.get("degrade_to", "rules")),
    )
    if b.policy not in POLICIES:
        raise BudgetError(f"budget {key}: policy {b.policy!r} must be reject or degrade")
    for soft, hard in (("soft_tokens", "hard_tokens"), ("soft_cost", "hard_cost")):
        if getattr(b, soft) is not None and getattr(b, hard) is not None and getattr(b, soft) > getattr(b, hard):
            raise BudgetError(
                f"budget {key}: {soft} {getattr(b, soft)} > {hard} {getattr(b, hard)}; soft must not exceed hard"
            )
    if all(getattr(b, f) is None for f in ("hard_tokens", "soft_tokens", "hard_cost", "soft_cost")):
        raise BudgetError(
            f"budget {key}: set at least one of hard_tokens, soft_tokens, hard_cost, soft_cost "
            f"(send an empty value to remove the budget)"
        )
    return b


class BudgetBook:
    def __init__(self, clock=time.time):
        self.clock = clock
        self.budgets: dict[str, Budget] = {}
        self.by_scope: dict[str, list[Budget]] = {}
        self.usage: dict[str, Usage] = {}
        self.open: dict[str, Reservation] = {}
        self.revision = 0  # bumped by every change worth a snapshot
        self.leased_tokens = False  # hard token limits are enforced by leases (streams.budgets), not by this book
        self._lock = threading.Lock()

    def apply(self, control: Control) -> None:
        """A control record kind="budget": set the budget at key, or remove it when value is empty."""
        if control.kind != "budget":
            raise BudgetError(f"control kind {control.kind!r} is not a budget")
        period = control.value.get("period", "day") if isinstance(control.value, dict) else "day"
        key = control.key if "@" in control.key else f"{control.key}@{period}"
        with self._lock:
            if not control.value:
                self.budgets.pop(key, None)
            else:
                self.budgets[key] = parse_budget(key, control.value)
            self.by_scope = {}
            for b in self.budgets.values():
                self.by_scope.setdefault(b.scope, []).append(b)
            self.revision += 1

    def _usage(self, b: Budget, now: float) -> Usage:
        window = time.strftime(PERIODS[b.period], time.gmtime(now))
        u = self.usage.get(b.key)
        if u is None or u.window != window:
            u = self.usage[b.key] = Usage(window)
        return u

    def reserve(
        self, scopes: list[str], tokens: int, cost: float, *, reservation_id: str | None = None
    ) -> Reservation | Refused:
        """Hold `tokens` and `cost` against every budget of `scopes`, or refuse without holding anything.
        A request no budget covers holds nothing: its reservation is not kept open."""
        if tokens < 0 or not 0 <= cost < math.inf:
            raise ValueError(f"reserve: tokens ({tokens}) and cost ({cost}) must be non-negative and finite")
        with self._lock:
            if reservation_id in self.open:  # a redelivered request holds its budget once
                return self.open[reservation_id]
            now = self.clock()
            held = [(b, self._usage(b, now)) for s in scopes for b in self.by_scope.get(s, ())]
            refusals = [r for b, u in held if (r := over_hard(b, u, tokens, cost, self.leased_tokens))]
            if refusals:
                first = next((r for r in refusals if r.policy == "reject"), refusals[0])
                b, u = next((b, u) for b, u in held if b.key == first.budget)
                alert = self._hard_alert(b, u, now)
                return Refused(first.reason, first.budget, first.policy, first.degrade_to, (alert,) if alert else ())
            alerts = []
            for b, u in held:
                u.reserved_tokens += tokens
                u.reserved_cost += cost
                alerts += self._soft_alerts(b, u, now)
            reservation = Reservation(
                reservation_id or uuid.uuid4().hex,
                tuple(b.key for b, _ in held),
                tuple(u.window for _, u in held),
                tokens,
                cost,
                now,
                tuple(alerts),
            )
            if held:
                self.open[reservation.id] = reservation
                self.revision += 1
            return reservation

    def settle(self, reservation: Reservation, actual_tokens: int, actual_cost: float) -> list[Alert]:
        """Count the actuals and release the rest of the reservation; settling twice counts once."""
        with self._lock:
            if self.open.pop(reservation.id, None) is None:
                return []
            self.revision += 1
            now = self.clock()
            alerts = []
            for key, window in zip(reservation.keys, reservation.windows):
                b = self.budgets.get(key)
                if b is None:
                    continue
                u = self._usage(b, now)
                if u.window == window:
                    u.reserved_tokens = max(0, u.reserved_tokens - reservation.tokens)
                    u.reserved_cost = max(0.0, u.reserved_cost - reservation.cost)
                u.used_tokens += actual_tokens
                u.used_cost += actual_cost
                alerts += self._soft_alerts(b, u, now)
            return alerts

    def release(self, reservation: Reservation) -> None:
        """The model work did not happen: give everything back."""
        self.settle(reservation, 0, 0.0)

    def expire(self, max_age_s: float) -> int:
        """Release reservations older than `max_age_s` (their worker died before settling)."""
        with self._lock:
            stale = [r for r in self.open.values() if self.clock() - r.created > max_age_s]
        for r in stale:
            self.release(r)
        return len(stale)

    def _soft_alerts(self, b: Budget, u: Usage, now: float) -> list[Alert]:
        alerts = []
        for metric, soft, spent in (
            ("tokens", b.soft_tokens, u.used_tokens + u.reserved_tokens),
            ("cost", b.soft_cost, u.used_cost + u.reserved_cost),
        ):
            if not soft:
                continue
            for ratio in b.alert_ratios:
                if spent >= soft * ratio and (tag := f"{metric}@{ratio:g}") not in u.fired:
                    u.fired.append(tag)
                    alerts.append(
                        Alert(
                            rule="budget_soft",
                            severity="critical" if ratio > 1 else "warning",
                            scope=b.key,
                            message=f"{b.key} {metric} at {spent / soft:.0%} of the soft budget {soft:g} ({u.window})",
                            value=float(spent),
                            threshold=float(soft * ratio),
                            ts=now,
                        )
                    )
        return alerts

    def _hard_alert(self, b: Budget, u: Usage, now: float) -> Alert | None:
        """The first refusal of a window raises one alert."""
        if "hard" in u.fired:
            return None
        u.fired.append("hard")
        return Alert(
            rule="budget_hard",
            severity="critical",
            scope=b.key,
            message=f"{b.key} hard budget reached ({u.window}): requests are now {b.policy}ed",
            ts=now,
            value=float(u.used_tokens + u.reserved_tokens),
            threshold=float(b.hard_tokens or 0),
        )

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "budgets": {
                    k: {f: list(v) if isinstance(v, tuple) else v for f, v in asdict(b).items() if f != "scope"}
                    for k, b in self.budgets.items()
                },
                "usage": {k: asdict(u) for k, u in self.usage.items()},
                "open": {
                    k: {
                        "id": r.id,
                        "keys": list(r.keys),
                        "windows": list(r.windows),
                        "tokens": r.tokens,
                        "cost": r.cost,
                        "created": r.created,
                    }
                    for k, r in self.open.items()
                },
            }

    @classmethod
    def restore(cls, state: dict, clock=time.time) -> BudgetBook:
        book = cls(clock)
        for key, value in state.get("budgets", {}).items():
            book.apply(Control(kind="budget", key=key, value={k: v for k, v in value.items() if v is not None}))
        book.usage = {k: Usage(**u) for k, u in state.get("usage", {}).items()}
        book.open = {
            k: Reservation(**(r | {"keys": tuple(r["keys"]), "windows": tuple(r["windows"])}))
            for k, r in state.get("open", {}).items()
        }
        return book


def over_hard(b: Budget, u: Usage, tokens: int, cost: float, leased_tokens: bool = False) -> Refused | None:
    if b.hard_tokens is not None and not leased_tokens and u.used_tokens + u.reserved_tokens + tokens > b.hard_tokens:
        reason = (
            f"budget {b.key} hard_tokens {b.hard_tokens}: used {u.used_tokens} + reserved "
            f"{u.reserved_tokens} + asked {tokens} would exceed it"
        )
    elif b.hard_cost is not None and u.used_cost + u.reserved_cost + cost > b.hard_cost + 1e-12:
        reason = (
            f"budget {b.key} hard_cost ${b.hard_cost:g}: used ${u.used_cost:.6f} + reserved "
            f"${u.reserved_cost:.6f} + asked ${cost:.6f} would exceed it"
        )
    else:
        return None
    return Refused(reason, b.key, b.policy, b.degrade_to)
