import pytest

from agents.models import Agent


@pytest.fixture
def director(registry):
    director = Agent.objects.create(
        agent_id="director",
        display_name="Director",
        kind=Agent.Kind.DIRECTOR,
        prompt_template="Plan for {{ tomorrow|date:'Y-m-d' }}. Targets: {{ targets|join:', ' }}",
        backoff_seconds=0,
        lock_timeout=30,
    )
    director.targets.add(registry["info"])
    return director
