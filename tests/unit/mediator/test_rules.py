import pytest

from mallory.errors import MalloryError
from mallory.mediator.rules import LinkRule, RuleTable

NODES = ["n1", "n2", "n3"]


def test_partition_is_every_link_across_groups_both_ways():
    t = RuleTable(NODES)
    links = t.partition_links([["n1"], ["n2", "n3"]])
    assert sorted(links) == [("n1", "n2"), ("n1", "n3"), ("n2", "n1"), ("n3", "n1")]
    t.drop(links)
    assert t.lookup(("n2", "n3")) is None and t.lookup(("n3", "n2")) is None
    assert all(t.lookup(link).drop for link in links)


def test_rules_combine_and_heal():
    t = RuleTable(NODES)
    t.delay([("n1", "n2")], 5_000_000)
    t.duplicate([("n1", "n2"), ("n2", "n1")], 2)
    assert t.lookup(("n1", "n2")) == LinkRule(drop=False, delay_ns=5_000_000, copies=2)
    assert t.lookup(("n2", "n1")) == LinkRule(copies=2)
    t.drop([("n1", "n2")])
    assert t.lookup(("n1", "n2")).drop
    assert t.heal([("n1", "n2"), ("n1", "n3")]) == [("n1", "n2")]  # n1->n3 had no rule
    assert t.lookup(("n1", "n2")) is None and t.lookup(("n2", "n1")) is not None
    assert t.heal(None) == [("n2", "n1")]
    assert t.rules == {}


def test_a_change_replaces_the_dict_the_firewall_thread_reads():
    t = RuleTable(NODES)
    before = t.rules
    t.drop([("n1", "n2")])
    assert before == {} and t.rules is not before


def test_zeroed_rule_is_no_rule():
    t = RuleTable(NODES)
    t.delay([("n1", "n2")], 0)
    assert t.lookup(("n1", "n2")) is None


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: t.drop([("n1", "n9")]), "unknown node"),
        (lambda t: t.drop([("n1", "n1")]), "no link to itself"),
        (lambda t: t.drop([]), "no links"),
        (lambda t: t.delay([("n1", "n2")], -1), "delay must be"),
        (lambda t: t.duplicate([("n1", "n2")], 99), "copies must be"),
        (lambda t: t.partition_links([["n1", "n2"]]), "at least two groups"),
        (lambda t: t.partition_links([["n1"], ["n1", "n2"]]), "two groups"),
        (lambda t: t.partition_links([["n1"], ["x"]]), "unknown node"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(call, message):
    t = RuleTable(NODES)
    t.drop([("n2", "n3")])
    before = dict(t.rules)
    with pytest.raises(MalloryError, match=message):
        call(t)
    assert t.rules == before
