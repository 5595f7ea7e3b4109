"""The agent layer's models: the agents (`agent.py`) and their durable runs (`run.py`)."""

from agents.models.agent import Agent
from agents.models.run import AgentRun, LeaseLost

__all__ = ["Agent", "AgentRun", "LeaseLost"]
