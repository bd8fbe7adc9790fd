"""The replica oracles on fake data: divergence fires when two nodes give different digests
at one index and stays quiet when they agree (or do not overlap); two leaders in a term
fires on logs where two nodes led one term and stays quiet otherwise; the shipped SUTs'
leader lines give their terms."""

from __future__ import annotations

import re

import pytest

from mallory import paths
from mallory.harness.spec import load_spec
from mallory.oracles.replicas import (
    divergence_findings,
    leader_terms,
    two_leaders_findings,
)
from mallory.suts.etcd.adapter import EtcdAdapter


def test_divergence_fires_at_the_lowest_index_where_digests_differ():
    digests = {"n1": {40: "aa", 42: "bb"}, "n2": {42: "cc", 45: "dd"}, "n3": {40: "aa", 42: "bb"}}
    (finding,) = divergence_findings(digests)
    assert finding.oracle == "replicas" and finding.kind == "divergence"
    assert finding.details["index"] == 42 and finding.details["digests"] == {"n1": "bb", "n2": "cc", "n3": "bb"}
    assert "log index 42" in finding.message and "n2 cc" in finding.message
    again = divergence_findings({"n1": {7: "x"}, "n2": {7: "y"}})[0]
    assert again.signature == finding.signature  # which nodes and indexes is no part of the bug


@pytest.mark.parametrize("digests", [
    {"n1": {40: "aa", 42: "bb"}, "n2": {42: "bb"}, "n3": {40: "aa", 45: "ee"}},  # agree where they overlap
    {"n1": {40: "aa"}, "n2": {41: "bb"}},  # no common index: nothing to compare
    {"n1": {40: "aa"}},
    {},
])  # fmt: skip
def test_divergence_is_quiet_when_replicas_agree_or_cannot_be_compared(digests):
    assert divergence_findings(digests) == []


RAFT_KV = load_spec(paths.SUTS / "raft" / "raft.toml").leader_line
PYSYNCOBJ = load_spec(paths.SUTS / "pysyncobj" / "pysyncobj.toml").leader_line


@pytest.mark.parametrize("pattern, line, term", [
    (RAFT_KV, "[raft-kv 10.101.1.2:7001 term 7 leader] became leader (was candidate)", 7),
    (PYSYNCOBJ, "leader is 10.101.1.2:7301 (self leader, term 4)", 4),
    (EtcdAdapter.leader_line, '{"level":"info","msg":"8e9e05c52164694d became leader at term 12"}', 12),
])  # fmt: skip
def test_the_shipped_leader_lines_give_the_term(pattern, line, term):
    assert leader_terms(f"noise\n{line}\nmore noise\n", re.compile(pattern)) == [term]


def test_raft_kv_lines_that_are_not_its_own_election_are_not_leadership():
    pattern = re.compile(RAFT_KV)
    log = "\n".join([
        "[raft-kv 10.101.1.2:7001 term 7 follower] became follower (was leader)",
        "[raft-kv 10.101.1.2:7001 term 7 follower] following leader 10.101.1.3:7001",
        "leader is 10.101.1.3:7301 (self follower, term 7)",
    ])  # fmt: skip
    assert leader_terms(log, pattern) == []


def test_two_leaders_in_one_term_fires_per_term_naming_the_leaders():
    terms = {"n1": [2, 5], "n2": [3, 5], "n3": [4, 5, 6], "n4": [6]}
    findings = two_leaders_findings(terms)
    assert [f.details for f in findings] == [{"term": 5, "leaders": ["n1", "n2", "n3"]}, {"term": 6, "leaders": ["n3", "n4"]}]
    assert findings[0].message == "two leaders in term 5: n1, n2, n3"
    assert findings[0].signature == findings[1].signature


def test_two_leaders_is_quiet_when_every_term_has_one_leader():
    assert two_leaders_findings({"n1": [2, 5, 5], "n2": [3, 6], "n3": []}) == []  # a node twice in a term is one leader
