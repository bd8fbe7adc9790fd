"""Whatever a history holds, every checker answers or raises MalloryError: never a crash."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.history import edn
from mallory.history.edn import Keyword
from mallory.history.ops import read_history_text
from mallory.oracles.check import CHECKERS, CheckOptions, check_history

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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from(("auto",) + CHECKERS))
def test_checkers_answer_or_reject_never_crash(text, checker):
    try:
        fmt, ops = read_history_text(text, "edn")
        result = check_history(ops, fmt, CheckOptions(checker=checker, time_limit=5))
    except MalloryError:
        return
    assert result.valid in (True, False, "unknown")
    result.render()
