"""Reading the index: keyword (BM25) and category search over a set of MCPlets the caller may
see. The set is a queryset of the live registry; its ids are read under the registry's current
version token (`mcplet_host.registry`: every write to a pool, server, MCPlet, agent or grant
moves it) and only postings of those ids are scored, so the index never returns a tool outside
it, nor one the registry changed since."""

import functools
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from django.db.models import Q

from mcplet_host import registry
from pools.models import Mcplet
from toolindex import text
from toolindex.index import K1
from toolindex.models import Posting

STRATEGIES = ("keyword", "semantic", "category")
# MGP §16.5's risk levels, from the MCPlet's type: a read changes nothing, a prepare only
# drafts, an action acts.
RISK_LEVELS = {"read": "safe", "prepare": "moderate", "action": "dangerous"}
RISK_ORDER = ("safe", "moderate", "dangerous")
MAX_QUERY_TERMS = 32
# How much a query term counts. A concept (`toolindex.lexicon`) is what was meant, whichever
# word or language said it: without more weight, the same word in a tool's text would match
# twice as well as a synonym or a translation. A Japanese word of n characters is n - 1
# bigrams: each counts half, or a Japanese query would outweigh the one English word it holds.
CONCEPT_WEIGHT, BIGRAM_WEIGHT = 2.0, 0.5


@dataclass
class Found:
    total_available: int
    search_strategy: str
    tools: list = field(default_factory=list)  # (Mcplet, relevance 0..1), best first
    fallback_strategy: str = ""
    started: float = field(default_factory=time.perf_counter)

    @property
    def query_time_ms(self):
        return round((time.perf_counter() - self.started) * 1000, 2)


def in_categories(candidates, categories):
    """Candidates in any of the categories (pool, MCPlet type or server), if any are named."""
    if not categories:
        return candidates
    return candidates.filter(
        Q(pool_name__in=categories) | Q(mcplet_type__in=categories) | Q(server__name__in=categories)
    )


def at_most(candidates, risk_level):
    if risk_level not in RISK_ORDER:
        return candidates
    allowed = RISK_ORDER[: RISK_ORDER.index(risk_level) + 1]
    return candidates.filter(mcplet_type__in=[t for t, r in RISK_LEVELS.items() if r in allowed])


def search(candidates, query, strategy="keyword", limit=5, categories=(), risk_level_max=""):
    """The best `limit` of `candidates` (a Mcplet queryset of the registry's watched tables)
    for `query`, as `Found`."""
    started, kept = time.perf_counter(), registry.current()
    pool = at_most(in_categories(candidates, list(categories)), risk_level_max)
    if strategy == "category":
        named = set(re.split(r"[\s,]+", query.strip())) - {""}
        if not categories and named:
            pool = at_most(in_categories(candidates, list(named)), risk_level_max)
        found = Found(len(kept.ids(pool)), "category", started=started)
        found.tools = [(m, 1.0) for m in pool.select_related("server").order_by("name")[:limit]]
        return found
    ids = kept.ids(pool)
    found = Found(len(ids), "keyword", started=started)
    if strategy == "semantic":  # no embeddings are kept: §16.4's fallback
        found.fallback_strategy = "keyword"
    found.tools = keyword(kept, ids, query, limit)
    return found


def keyword(kept, ids, query, limit):
    """BM25 over the postings of the MCPlets `ids`, the best `limit` as (Mcplet, relevance)."""
    documents = len(kept.ids(Mcplet.objects.all())) if ids else 0
    postings = lambda terms: _postings(kept, terms)  # noqa: E731
    top = rank(postings, lambda: _operations(kept), documents, ids, query, limit)
    tools = Mcplet.objects.select_related("server").in_bulk([pk for pk, _ in top])
    return [(tools[pk], relevance) for pk, relevance in top]


def rank(postings, operations, documents, ids, query, limit):
    """The best `limit` of `ids` as (id, relevance 0..1): each query term's idf (over the
    `documents` of the whole index) times the stored term weight, summed per id. `postings`
    maps terms to {id: weight} for those of them the index holds; `operations()` gives
    ({id: Operation}, {word of a server's name: ids of its tools}), and the result is one tool
    per operation (`distinct`)."""
    wanted = Counter(text.terms(query)[: MAX_QUERY_TERMS * 4])
    wanted = Counter(dict(wanted.most_common(MAX_QUERY_TERMS)))
    if not wanted or limit <= 0 or not ids:
        return []
    scores = Counter()
    best = 0.0
    for term, found in postings(list(wanted)).items():
        idf = math.log(1 + max(documents - len(found) + 0.5, 0.5) / (len(found) + 0.5))
        idf *= wanted[term] * _weight(term)
        best += idf * (K1 + 1)  # every term present, saturated: relevance 1
        for mcplet, weight in found.items():
            if mcplet in ids:
                scores[mcplet] += weight * idf
    operations, servers = operations() if scores else ({}, {})
    words = set(wanted)
    named = {
        pk: operations[pk].named(words)
        for word in words & servers.keys()
        for pk in servers[word]
        if pk in scores
    }
    top = distinct(scores, operations, named, limit)
    return [(pk, round(min(score / best, 1.0), 4)) for pk, score in top]


def _weight(term):
    if term.startswith("~"):
        return CONCEPT_WEIGHT
    return BIGRAM_WEIGHT if len(term) == 2 and not term.isascii() else 1.0


def distinct(scores, operations, named, limit):
    """The best `limit` operations (each scored as its best tool), each as (tool, score); then,
    if fewer operations match, the other tools in order. The same tool of many servers (one
    per vendor or region) would otherwise fill the answer and hide the other things the query
    may mean; the model calls one tool anyway, and asks for a server by naming it. An
    operation's tool is the one of the server the query names most (`named`: id → how much,
    for the tools of servers it names), else its best."""
    ranked = sorted(sorted(scores.items()), key=itemgetter(1), reverse=True)  # ties: by id
    best = {}  # operation → its best (id, score), best first
    for pk, score in ranked:
        best.setdefault(operations[pk].name, (pk, score))
        if len(best) == limit:
            break
    shown = {name: (named.get(pk, 0.0), score, -pk) for name, (pk, score) in best.items()}
    for pk, share in named.items():
        name = operations[pk].name
        if name in shown:
            shown[name] = max(shown[name], (share, scores[pk], -pk))
    chosen = [(-shown[name][2], score) for name, (_, score) in best.items()]
    taken = {pk for pk, _ in chosen}
    return chosen + [item for item in ranked if item[0] not in taken][: limit - len(chosen)]


class Operation(NamedTuple):
    """What a tool does, whichever server offers it (its name without its server's name in
    front: `jira_eu_create_issue` of server `jira-eu` and `create_issue` of `github` alike),
    and the words of its server's name."""

    name: str
    server: frozenset

    @classmethod
    def of(cls, name, server):
        prefix, words = _server(server)
        name = name.lower()
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
        return cls(name, words)

    def named(self, words):
        """How much of its server's name is among `words` (0..1)."""
        return len(self.server & words) / len(self.server) if self.server else 0.0


@functools.lru_cache(maxsize=4096)  # servers are few, their tools many
def _server(name):
    prefix = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_"
    return prefix, frozenset(text.words(name))


def _operations(kept):
    """({MCPlet id: Operation} for every MCPlet, {word of a server's name: ids of its tools}),
    read once per registry token."""

    rows = Mcplet.objects.values_list("pk", "name", "server__name")
    return kept.kept("operations", lambda: operations_of(rows))


def operations_of(rows):
    """({id: Operation}, {word of a server's name: ids of its tools}) of (id, tool name,
    server name) rows."""
    operations = {pk: Operation.of(name, server) for pk, name, server in rows}
    servers = {}
    for pk, operation in operations.items():
        for word in operation.server:
            servers.setdefault(word, []).append(pk)
    return operations, servers


def _postings(kept, terms):
    """term → {MCPlet id: weight} for the terms of the index among `terms`. Kept per registry
    token (the index is written in the transactions that write the MCPlets, and its table is
    watched): a term is read from the database once until the registry changes. Terms the
    index lacks are not kept, so a flood of invented words costs queries, not memory."""
    known = kept.kept("postings", dict)
    missing = [term for term in terms if term not in known]
    if missing:
        fetched = {}  # whole, then kept at once: another thread never reads a term half-filled
        rows = Posting.objects.filter(term__in=missing).values_list("term", "mcplet", "weight")
        for term, mcplet, weight in rows:
            fetched.setdefault(term, {})[mcplet] = weight
        known.update(fetched)
    return {term: known[term] for term in terms if term in known}
