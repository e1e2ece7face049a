"""Use AgentState from other processes: `AgentStateStore` (a LangGraph `BaseStore` whose items
are remembered facts about people), over the REST API with an API key."""

from agentstate_client.client import AgentStateError, Client
from agentstate_client.store import AgentStateStore

__all__ = ["AgentStateError", "AgentStateStore", "Client"]
