"""Reading the index: keyword (BM25) and category search over a set of MCPlets the caller may
see. The set is a queryset of the live registry, joined in the same statement, so the index
can never return a tool outside it."""

import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count, Q

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
# A term in more MCPlets than this (and than this share of them) is common (see `keyword`).
COMMON, COMMON_SHARE = 50, 0.02
# The rare terms' MCPlets are enough to rank when there are this many (see `keyword`).
ENOUGH = 100


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
    started = time.perf_counter()
    pool = at_most(in_categories(candidates, list(categories)), risk_level_max)
    if strategy == "category":
        named = set(re.split(r"[\s,]+", query.strip())) - {""}
        if not categories and named:
            pool = at_most(in_categories(candidates, list(named)), risk_level_max)
        ids = registry.current().ids(pool)
        found = Found(len(ids), "category", started=started)
        found.tools = [(m, 1.0) for m in pool.select_related("server").order_by("name")[:limit]]
        return found
    ids = registry.current().ids(pool)
    found = Found(len(ids), "keyword", started=started)
    if strategy == "semantic":  # no embeddings are kept: §16.4's fallback
        found.fallback_strategy = "keyword"
    found.tools = keyword(ids, query, limit)
    return found


def keyword(ids, query, limit):
    """BM25 over the postings of the MCPlets `ids`: each query term's idf (from the whole
    index) times the stored term weight, summed per MCPlet. The rarer terms are read first;
    the common ones (most tools have them) only for the MCPlets the rare ones found, unless
    those are too few to rank (ENOUGH): then for all."""
    wanted = Counter(text.terms(query)[: MAX_QUERY_TERMS * 4])
    wanted = Counter(dict(wanted.most_common(MAX_QUERY_TERMS)))
    if not wanted or limit <= 0 or not ids:
        return []
    documents = max(Mcplet.objects.count(), 1)
    frequency = dict(
        Posting.objects.filter(term__in=wanted).values_list("term").annotate(n=Count("id"))
    )
    idf = {
        term: math.log(1 + (documents - n + 0.5) / (n + 0.5)) * wanted[term]
        for term, n in frequency.items()
    }
    cut = max(COMMON, documents * COMMON_SHARE)
    rare = [term for term in idf if frequency[term] <= cut]
    common = [term for term in idf if frequency[term] > cut]
    scores = Counter()
    _add(scores, Posting.objects.filter(term__in=rare), idf, ids)
    if common:
        postings = Posting.objects.filter(term__in=common)
        if len(scores) >= max(limit, ENOUGH):
            postings = postings.filter(mcplet__in=list(scores))
        _add(scores, postings, idf, ids)
    best = sum(idf.values()) * (K1 + 1)  # every term present, saturated: relevance 1
    top = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
    tools = Mcplet.objects.select_related("server").in_bulk([pk for pk, _ in top])
    return [(tools[pk], round(min(score / best, 1.0), 4)) for pk, score in top]


def _add(scores, postings, idf, ids):
    for mcplet, term, weight in postings.values_list("mcplet", "term", "weight"):
        if mcplet in ids:
            scores[mcplet] += weight * idf[term]
