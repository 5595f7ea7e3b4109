"""Writing the index: an MCPlet's fields, weighted, become its postings (MGP §16.4: name,
description, categories, keywords — here the argument names and their descriptions)."""

from collections import Counter

from django.db import transaction

from toolindex import text
from toolindex.models import Posting

# BM25's constants, the usual ones; document length is taken against a fixed typical length
# so one MCPlet's weights never depend on the others (a change re-indexes only that MCPlet).
K1, B, TYPICAL_LENGTH = 1.2, 0.75, 40.0
# How much a term counts in each field: a tool's name says most about what it does.
FIELD_WEIGHTS = {"name": 3.0, "title": 2.0, "description": 1.0, "arguments": 0.5, "category": 1.0}


def fields(mcplet):
    """The searchable text of an MCPlet, by field."""
    properties = (mcplet.input_schema or {}).get("properties") or {}
    arguments = []
    if isinstance(properties, dict):
        for name, spec in properties.items():
            arguments.append(str(name))
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                arguments.append(spec["description"])
    return {
        "name": mcplet.name,
        "title": mcplet.title,
        "description": mcplet.description,
        "arguments": " ".join(arguments),
        "category": " ".join(categories(mcplet)),
    }


def categories(mcplet):
    """MGP §16.4 categories: the pool it declares, its MCPlet type and its server."""
    return [c for c in (mcplet.pool_name, mcplet.mcplet_type, mcplet.server.name) if c]


def weights(mcplet):
    """term → BM25 term-frequency weight (without the idf, which is the whole index's)."""
    frequency = Counter()
    for field, value in fields(mcplet).items():
        for term in text.terms(value):
            frequency[term] += FIELD_WEIGHTS[field]
    length = sum(frequency.values())
    norm = K1 * (1 - B + B * length / TYPICAL_LENGTH)
    return {term: tf * (K1 + 1) / (tf + norm) for term, tf in frequency.items()}


def reindex(mcplets):
    """Replace the postings of these MCPlets (their server loaded) with their current terms."""
    mcplets = list(mcplets)
    if not mcplets:
        return
    with transaction.atomic():
        Posting.objects.filter(mcplet__in=[m.pk for m in mcplets]).delete()
        Posting.objects.bulk_create(
            [
                Posting(mcplet=m, term=term, weight=weight)
                for m in mcplets
                for term, weight in weights(m).items()
            ],
            batch_size=2000,
        )
