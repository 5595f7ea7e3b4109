import pytest
import yaml

from agents.models import Agent
from mcplet_host.celery import app


@pytest.fixture
def script(tmp_path, settings):
    """Write a scripted-model script; returns the model string that plays it."""
    settings.MCPLET_SCRIPT_DIRS = [str(tmp_path)]

    def write(agents, name="test"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"agents": agents}))
        return f"scripted/{name}"

    return write


@pytest.fixture
def eager():
    """Run the bus and the continuations in this thread, at each commit (use with
    django_db(transaction=True)). Workers are exercised by the tests marked `services`."""
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager = app.conf.task_eager_propagates = False


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
