"""Every checker answers a history of its own workload, and rejects anything else in words
that say where: never a crash, never a rejection of a well-formed history.

Two properties. Over well-formed histories of each checker's workload (register ops for the
linearizability models, list-append / rw-register transactions of the right shape, with
concurrency, failures, crashes and never-completed ops), the checker must answer (valid
True, False or "unknown"), both when named and when inferred: a MalloryError there is a
bug. Over arbitrary histories, a checker may also reject, but its message must point at
the line of the op it could not read, or (when it cannot even infer the workload) name the
option that would settle it.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.edn import Keyword
from mallory.history.ops import read_history_text
from mallory.oracles.check import CHECKERS, CheckOptions, check_history

K = Keyword

# -- arbitrary histories: answered, or rejected saying where ----------------------------------

scalars = (st.none() | st.integers(-3, 6) | st.booleans() | st.sampled_from(["", "a", "x 1"])
           | st.sampled_from([Keyword(k) for k in ("x", "y", "ok", "append", "r", "w")]))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(scalars, c, max_size=2),
                      max_leaves=6)
mop = st.tuples(st.sampled_from([Keyword(f) for f in ("append", "r", "w", "read", "write")]),
                scalars | st.lists(scalars, max_size=2), values).map(list)
fs = st.sampled_from([Keyword(f) for f in ("txn", "read", "write", "cas", "acquire", "release", "get", "put",
                                           "append")])


@st.composite
def histories(draw):
    open_: set[int] = set()
    ops = []
    for _ in range(draw(st.integers(0, 10))):
        p = draw(st.integers(0, 2))
        typ = "invoke" if p not in open_ else draw(st.sampled_from(["ok", "fail", "info"]))
        (open_.add if typ == "invoke" else open_.discard)(p)
        f = draw(fs)
        value = draw(st.lists(mop, max_size=3)) if f == "txn" and draw(st.booleans()) else draw(values)
        ops.append({Keyword("type"): Keyword(typ), Keyword("process"): p, Keyword("f"): f, Keyword("value"): value})
    return "\n".join(edn.dumps(m) for m in ops)


#: where a rejection points: "SOURCE:LINE: ...", "line LINE: ...", or "op INDEX"
_LOCATION = re.compile(r"(?::(\d+):|\bline (\d+)\b|\bop (\d+)\b)")


def assert_says_where(message: str, lines: int) -> None:
    """A rejection names a line of the history (or an op of it), or, when the workload
    itself could not be inferred, the --checker option that settles it."""
    if "pass --checker" in message:
        return
    m = _LOCATION.search(message)
    assert m is not None, f"the rejection does not say where: {message!r}"
    line, line2, op = m.groups()
    if op is None:
        assert 1 <= int(line or line2) <= lines, f"the rejection names a line the history does not have: {message!r}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from(("auto",) + CHECKERS))
def test_checkers_answer_or_reject_saying_where(text, checker):
    try:
        fmt, ops = read_history_text(text, "edn")
        result = check_history(ops, fmt, CheckOptions(checker=checker, time_limit=5))
    except MalloryError as exc:
        assert_says_where(str(exc), max(1, text.count("\n") + 1))
        return
    assert result.valid in (True, False, "unknown")
    result.render()


# -- well-formed histories: always answered -----------------------------------------------------

KEYS = [K("x"), K("y")]
STRINGS = st.sampled_from(["", "a", "b", "ab"])


@st.composite
def _register_call(draw, checker, serial):
    """(f, invoke value, ok value) of one call of a linearizability workload."""
    v = st.integers(0, 3)
    if checker in ("register", "cas-register"):
        f = draw(st.sampled_from(["read", "write"] + (["cas"] if checker == "cas-register" else [])))
        if f == "read":
            return K("read"), None, draw(v | st.none())
        if f == "write":
            w = draw(v)
            return K("write"), w, w
        old_new = [draw(v), draw(v)]
        return K("cas"), old_new, old_new
    if checker == "mutex":
        f = K(draw(st.sampled_from(["acquire", "release"])))
        return f, None, None
    if checker == "kv":
        f = draw(st.sampled_from(["get", "put", "append"]))
        key = draw(st.sampled_from(["k1", "k2"]))
        if f == "get":
            return K("get"), [key, None], [key, draw(STRINGS)]
        s = draw(STRINGS)
        return K(f), [key, s], [key, s]
    # a transaction: multi-register, list-append or rw-register
    read, write = {"multi-register": ("read", "write"), "list-append": ("r", "append"),
                   "rw-register": ("r", "w")}[checker]
    invoke, done = [], []
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.sampled_from(KEYS))
        if draw(st.booleans()):
            if checker == "list-append":
                seen = draw(st.none() | st.lists(st.integers(0, 6), max_size=3))
            else:
                seen = draw(st.none() | st.integers(0, 6))
            invoke.append([K(read), k, None])
            done.append([K(read), k, seen])
        else:
            w = next(serial) if checker != "multi-register" else draw(st.integers(0, 3))  # unique writes
            invoke.append([K(write), k, w])
            done.append([K(write), k, w])
    return K("txn"), invoke, done


@st.composite
def well_formed(draw, checker):
    """EDN text of a well-formed history of `checker`'s workload: up to 3 processes, each
    invoking one call at a time; a call completes ok (reads filled in), fails, crashes
    (:info, and its process is retired as Jepsen does) or never completes."""
    serial = iter(range(1, 1000))
    lines: list[str] = []
    open_: dict[int, tuple] = {}
    next_process = 3
    free = [0, 1, 2]
    for _ in range(draw(st.integers(1, 12))):
        if open_ and (not free or draw(st.booleans())):
            p = draw(st.sampled_from(sorted(open_)))
            f, inv, ok = open_.pop(p)
            typ = draw(st.sampled_from(["ok", "ok", "fail", "info"]))
            value = ok if typ == "ok" else inv
            if typ == "info":
                free.append(next_process)
                next_process += 1
            else:
                free.append(p)
        else:
            p = free.pop(draw(st.integers(0, len(free) - 1)))
            f, value, ok = draw(_register_call(checker, serial))
            open_[p] = (f, value, ok)
            typ = "invoke"
        lines.append(edn.dumps({K("type"): K(typ), K("process"): p, K("f"): f, K("value"): value}))
    return "\n".join(lines)


@st.composite
def checker_and_history(draw):
    checker = draw(st.sampled_from(CHECKERS))
    return checker, draw(well_formed(checker))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checker_and_history())
def test_every_checker_answers_every_well_formed_history_of_its_workload(case):
    checker, text = case
    fmt, ops = read_history_text(text, "edn")
    for named in (checker, "auto"):
        try:
            result = check_history(ops, fmt, CheckOptions(checker=named, time_limit=5))
        except MalloryError as exc:
            raise AssertionError(f"{named} rejected a well-formed {checker} history: {exc}\n{text}") from None
        assert result.valid in (True, False, "unknown"), result.valid
        result.render()
