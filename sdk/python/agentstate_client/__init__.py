"""Use AgentState from other processes, over the REST API with an API key: `AgentStateSaver`
(a LangGraph checkpointer keeping threads in AgentState) and `AgentStateStore` (a LangGraph
`BaseStore` whose items are remembered facts about people)."""

from agentstate_client.client import AgentStateError, Client
from agentstate_client.saver import AgentStateSaver
from agentstate_client.store import AgentStateStore

__all__ = ["AgentStateError", "AgentStateSaver", "AgentStateStore", "Client"]
