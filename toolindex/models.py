from django.db import models

from pools.models import Mcplet


class Posting(models.Model):
    """One term of one MCPlet with its BM25 term weight: the inverted index the keyword search
    reads by term. Whether the MCPlet may be shown is never stored here: every search joins the
    live registry (status, surfaces, pool, grants), so an evicted or re-pooled tool is gone from
    results at once, before anything is indexed again."""

    mcplet = models.ForeignKey(Mcplet, on_delete=models.CASCADE, related_name="postings")
    term = models.CharField(max_length=64)
    weight = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["term", "mcplet"], name="unique_posting"),
        ]
        indexes = [models.Index(fields=["mcplet"], name="posting_by_mcplet")]

    def __str__(self):
        return f"{self.term} → {self.mcplet_id} ({self.weight:.3f})"
