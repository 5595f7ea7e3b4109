from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self):
        from django_celery_beat.models import CrontabSchedule, PeriodicTask

        from agents.models import Agent
        from mcplet_host import config_audit as config

        config.track(Agent, "agent", secret=("credentials",), grants=_grants)
        config.track_grants(Agent.accessible_pools, "agent", "pools")
        config.track_grants(Agent.callable_agents, "agent", "callable agents")
        config.track_grants(Agent.targets, "agent", "targets")
        # Beat writes its bookkeeping on the same rows at every run: not configuration.
        config.track(
            PeriodicTask, "schedule", exclude=("last_run_at", "total_run_count", "date_changed")
        )
        config.track(CrontabSchedule, "crontab")


def _grants(agent):
    """What an agent's deletion takes with it."""
    return {
        "pools": sorted(str(p) for p in agent.accessible_pools.all()),
        "callable agents": sorted(str(a) for a in agent.callable_agents.all()),
        "callable by": sorted(str(a) for a in agent.callable_by.all()),
    }
