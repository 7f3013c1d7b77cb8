"""Freshness of a dataset against its contract's ``freshness`` promise, as ``lakepub status`` shows it.

Two forms (parsed by ``spec.parse_freshness``):

* ``within 2h`` (``m``/``h``/``d``): on time while the newest publish is at most that old; late by
  how much older it is (dbt's source freshness, on the published snapshot's commit time);
* ``published by 08:00 UTC daily`` (or ``by HH:MM UTC hourly``, minute MM of every hour): the
  newest deadline ``D <= now`` closes the cycle ``(D - period, D]``, and only that deadline is
  judged. On time if a publish landed in that cycle. If the first publish after ``D - period``
  came after ``D``, the data came late by that much; if there is none, it is late by ``now - D``
  and counting. The next deadline is shown too.

Only committed snapshots count (a refused or unpublished batch does not), and the times are the
published tables' own commit timestamps, so ``status`` needs no clock of its own but ``now``
(``--as-of`` evaluates at another instant, for a report or a test). Cost: a walk over the
snapshot list already loaded for status, no data read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone

from lakepub.contract.spec import parse_freshness


@dataclass(frozen=True)
class Freshness:
    rule: str
    state: str                 # on time | late
    late_by_s: float | None    # None when on time
    last_published: str | None
    deadline: str | None = None       # the deadline judged (by ... rules)
    next_deadline: str | None = None
    max_age_s: int | None = None      # within ... rules

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def text(self) -> str:
        when = "on time" if self.state == "on time" else f"late by {_human(self.late_by_s or 0)}"
        if self.deadline:
            return f"{when} ({self.rule}; deadline {self.deadline}, next {self.next_deadline})"
        return f"{when} ({self.rule}; last published {self.last_published or 'never'})"


def evaluate(rule: str, published_ms: list[int], now: datetime) -> Freshness:
    """``published_ms``: commit times (epoch ms) of the dataset's publishes, any order."""
    spec = parse_freshness(rule)
    times = sorted(datetime.fromtimestamp(ms / 1000, tz=timezone.utc) for ms in published_ms)
    last = times[-1] if times else None
    if "max_age_s" in spec:
        limit = spec["max_age_s"]
        age = (now - last).total_seconds() if last else None
        late = None if age is not None and age <= limit else (age - limit if age is not None else None)
        state = "on time" if age is not None and age <= limit else "late"
        return Freshness(rule, state, late, _iso(last), max_age_s=limit)
    hour, minute = map(int, spec["by"].split(":"))
    period = timedelta(days=1) if spec["every"] == "daily" else timedelta(hours=1)
    if spec["every"] == "daily":
        deadline = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    else:
        deadline = now.replace(minute=minute, second=0, microsecond=0)
    if deadline > now:
        deadline -= period
    first = next((t for t in times if t > deadline - period), None)
    if first is not None and first <= deadline:
        state, late = "on time", None
    else:
        state, late = "late", ((first if first is not None else now) - deadline).total_seconds()
    return Freshness(rule, state, late, _iso(last), _iso(deadline), _iso(deadline + period))


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def _human(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
