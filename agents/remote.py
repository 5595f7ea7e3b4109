"""A run of a remote A2A agent: the host sends the §18 task request to it as a DataPart
(SendMessage, our contextId), follows the remote task (GetTask) until it ends, and finishes the
run with its answer — the one task response on the bus, the audit event and the hand-off, as
for any agent. It runs in the worker that advances the run (bounded by DEADLINE); the remote
task's id is saved as soon as it is known, so a redelivery follows that task instead of sending
the request again. The remote agent gets the task's parameters and nothing else: no pools, no
key, no way back in but the answer."""

import time

from django.utils import timezone

from a2a import outbound
from agents.models import AgentRun
from mcplet_host import audit

DEADLINE = 120  # seconds from the run's start until an unfinished remote task times out
POLL = (0.2, 2.0)  # first and longest wait between two GetTask
JSON = "application/json"

ENDED = {
    "TASK_STATE_COMPLETED": AgentRun.Status.SUCCESS,
    "TASK_STATE_FAILED": AgentRun.Status.ERROR,
    "TASK_STATE_REJECTED": AgentRun.Status.ERROR,
    "TASK_STATE_CANCELED": AgentRun.Status.CANCELLED,
    # This host does not converse with a remote agent: a question back ends the task.
    "TASK_STATE_INPUT_REQUIRED": AgentRun.Status.ERROR,
}


def _data(parts):
    return next((part["data"] for part in parts if "data" in part), None)


def _text(parts):
    return "\n".join(part["text"] for part in parts if "text" in part)


def _answer(parts):
    """The result a remote agent's parts carry: a §18 task response's result, any other
    DataPart as it is (an object), or its text."""
    data = _data(parts)
    if isinstance(data, dict) and data.get("type") == "task_response":
        return (data.get("payload") or {}).get("result")
    if data is not None:
        return data if isinstance(data, dict) else {"data": data}
    return {"text": _text(parts)}


class RemoteCall:
    def __init__(self, run):
        self.run, self.agent = run, run.agent

    def outcome(self):
        """How the run ends: (status, {"result", "error"}) for ending.finish."""
        run = self.run
        try:
            url = outbound.jsonrpc_url(self.agent.remote_card or self.agent.refresh_card())
            task = self._task(url)
            while task is not None and task["status"]["state"] not in ENDED:
                if (timezone.now() - run.started_at).total_seconds() > DEADLINE:
                    return self._end(
                        AgentRun.Status.TIMEOUT,
                        error=f"the remote task did not end within {DEADLINE} seconds",
                    )
                time.sleep(min(POLL[1], POLL[0] * 2 ** len(run.transcript)))
                task = outbound.get_task(url, self.agent.credentials, task["id"])
                self._keep(task)
        except outbound.RemoteError as exc:
            return self._end(AgentRun.Status.ERROR, error=str(exc))
        if task is None:  # a Message: the whole answer at once
            return self._end(AgentRun.Status.SUCCESS, result=_answer(run.transcript[-1]["parts"]))
        status = ENDED[task["status"]["state"]]
        if status != AgentRun.Status.SUCCESS:
            said = _text((task["status"].get("message") or {}).get("parts", []))
            return self._end(status, error=f"{task['status']['state']}: {said or 'no reason'}")
        parts = [part for artifact in task.get("artifacts", []) for part in artifact["parts"]]
        return self._end(status, result=_answer(parts))

    def _task(self, url):
        """The remote task to follow: the one already sent, or a new one (None: it answered
        with a Message)."""
        sent = [entry for entry in self.run.transcript if "id" in entry and "status" in entry]
        if sent:
            return outbound.get_task(url, self.agent.credentials, sent[-1]["id"])
        request = self.run.request
        message = {
            "messageId": str(request.message_id),
            "contextId": str(request.context_id),
            "role": "ROLE_USER",
            "parts": [
                {"data": request.body, "mediaType": JSON},
                {"text": f"A task from {request.sender_id} (§18.4 task request)."},
            ],
        }
        answer = outbound.send_message(url, self.agent.credentials, message)
        audit.record(
            "a2a.remote.sent",
            actor_type=audit.ActorType.AGENT,
            actor_id=request.sender_id,
            result=audit.SUCCESS,
            trace_id=str(request.context_id),
            details={
                "recipient": self.agent.agent_id,
                "messageId": message["messageId"],
                "remoteTaskId": (answer.get("task") or {}).get("id", ""),
                "url": url,
            },
        )
        self._keep(answer.get("task") or answer["message"])
        return answer.get("task")

    def _keep(self, entry):
        # The transcript of a remote run is what the remote agent said, last one last.
        self.run.transcript = [*self.run.transcript, entry]
        self.run.keep("transcript")  # and its lease renewed: a remote task may take a while

    def _end(self, status, *, result=None, error=None):
        if error is not None:
            error = {"code": "X_REMOTE", "message": f"{self.agent.agent_id}: {error}"}
        return status, {"result": result, "error": error}
