"""A support bot that knows nothing about looplift: a plain `openai` client, tool calls, user feedback.

It answers "Where is order 91234?" by calling a `lookup_order` tool and reporting what the tool said. Point it
at a gateway started with capture on, and every exchange becomes training data without any SDK in the app:

    looplift up --capture                                    # in another terminal
    python examples/support_bot.py --conversations 40        # the app; users rate the answers

What makes it learnable, with nothing but HTTP headers and the completion's id:

* `X-Looplift-Session` (one value per conversation) stitches the tool call and the final answer into one
  trajectory; `X-Looplift-App` names the app (`support-bot`) and `X-Looplift-Task` the task.
* Feedback by the id the client already has: the user's thumbs up/down goes to the gateway's
  `POST /v1/feedback {"response_id": <the completion's id>, "rating": 1 | -1}`. Here the "user" is simulated:
  happy when the bot looked up the order they asked about, unhappy otherwise.

The same module holds the app's own eval suite, `suite`: held-out orders (ids 90000-99999, which the tiny
base model never saw), the tool, and a verifier that checks the call named the order the user asked about.
The retrain gate runs it on the candidate and the serving version:

    trainer run --eval examples.support_bot:suite --app support-bot --min-score 0.75

(`--min-score 0.75`: train on conversations the users rated up, since this app has no verifier of its own in
production). Scheduled instead of by hand: `looplift up --capture --retrain "0 3 * * *"` with the same
options in `looplift.toml`, or `trainer schedule --new-data 40 ...`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import uuid
from typing import Any, Optional

import httpx
import openai

import sdk

APP = "support-bot"
LOOKUP_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up the status of an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
#: The bot always looks the order up first (a named tool_choice), then answers in words (tool_choice "none").
CALL = {"type": "function", "function": {"name": "lookup_order"}}
STATUSES = ("shipped", "delivered", "packed", "returned", "delayed", "cancelled")


def order_status(order_id: str) -> str:
    """The shop's order database: every id has a status (a hash, so it needs no storage)."""
    return STATUSES[int(hashlib.sha256(order_id.encode()).hexdigest(), 16) % len(STATUSES)]


def called_order(message: Any) -> Optional[str]:
    """The `order_id` of the assistant message's `lookup_order` call, or None."""
    for call in message.tool_calls or []:
        if call.function.name == "lookup_order":
            try:
                value = json.loads(call.function.arguments).get("order_id")
            except (ValueError, AttributeError):
                return None
            return str(value) if value is not None else None
    return None


# ---- the app: any OpenAI client, plus three headers ----------------------------------------------------
def converse(client: openai.OpenAI, order_id: str, model: str = "policy") -> dict[str, Any]:
    """One conversation: the user asks, the bot calls the tool, reads the result and answers."""
    headers = {"X-Looplift-Session": uuid.uuid4().hex, "X-Looplift-App": APP, "X-Looplift-Task": f"order-{order_id}"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Where is order {order_id}?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=[LOOKUP_TOOL],  # type: ignore[arg-type]
                                           tool_choice=CALL, max_tokens=32, extra_headers=headers)
    msg = first.choices[0].message
    looked_up = called_order(msg)
    status = order_status(looked_up) if looked_up else "unknown order"
    messages += [msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": msg.tool_calls[0].id if msg.tool_calls else "call_0", "content": status}]
    final = client.chat.completions.create(model=model, messages=messages, tools=[LOOKUP_TOOL],  # type: ignore[arg-type]
                                           tool_choice="none", max_tokens=16, extra_headers=headers)
    return {"order_id": order_id, "looked_up": looked_up, "answer": final.choices[0].message.content or "",
            "response_id": final.id, "served_by": final.model}


def give_feedback(gateway: str, api_key: str, conv: dict[str, Any]) -> int:
    """The simulated user's thumbs up (the bot looked up their order) or down; returns the HTTP status."""
    rating = 1 if conv["looked_up"] == conv["order_id"] else -1
    r = httpx.post(f"{gateway}/feedback", json={"response_id": conv["response_id"], "rating": rating},
                   headers={"Authorization": f"Bearer {api_key}"}, timeout=60)
    return r.status_code


# ---- the app's eval suite (what the retrain gate compares versions on) -----------------------------------
class OrderEnv:
    """The eval-time twin of the app: one question, the `lookup_order` tool; the episode ends at the call."""

    tools = [LOOKUP_TOOL]

    def reset(self, task: sdk.Task) -> str:
        return task.prompt

    def step(self, action: str) -> sdk.StepResult:
        return sdk.StepResult(observation="Please look the order up.", done=True)

    def step_tool(self, call: sdk.ToolCall) -> sdk.StepResult:
        try:
            order_id = str(json.loads(call.function.arguments).get("order_id"))
        except (ValueError, AttributeError):
            order_id = ""
        return sdk.StepResult(observation=order_status(order_id), done=True, info={"order_id": order_id})


class LookedUpTheRightOrder:
    """Success: the bot's `lookup_order` call named the order the user asked about."""

    def verify(self, task: sdk.Task, trajectory: sdk.Trajectory) -> sdk.Outcome:
        called = [s.info.get("order_id") for s in trajectory.steps if s.tool_call is not None]
        ok = bool(called) and called[0] == task.data["order_id"]
        return sdk.Outcome(success=ok, reward=float(ok), details={"called": called[:1]})


def held_out_orders(n: int = 60, seed: int = 7) -> list[sdk.Task]:
    """Orders 90000-99999: never in the base model's demonstrations, never asked in production by this app."""
    rng = random.Random(seed)
    ids = rng.sample(range(90000, 100000), n)
    return [sdk.Task(id=f"order-{i}", prompt=f"Where is order {i}?", data={"order_id": str(i)}) for i in ids]


def suite() -> sdk.EvalSuite:
    """`trainer run --eval examples.support_bot:suite`."""
    return sdk.EvalSuite(name="support-bot-orders", tasks=held_out_orders(), env_factory=OrderEnv,
                         verifier=LookedUpTheRightOrder(), budget=sdk.Budget(max_steps=1),
                         # Sampled as in production (temperature 1: greedy copies every id right, measured),
                         # seeded per task by the gate so both versions draw alike.
                         sampling=sdk.Sampling(temperature=1.0, max_tokens=32), tool_choice=CALL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=40)
    ap.add_argument("--gateway", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default="unused", help="A key from $LOOPLIFT_API_KEYS when the gateway has keys.")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    client = openai.OpenAI(base_url=args.gateway, api_key=args.api_key)
    rng = random.Random(args.seed)
    right = rated = 0
    for _ in range(args.conversations):
        conv = converse(client, str(rng.randint(10000, 89999)))
        right += conv["looked_up"] == conv["order_id"]
        rated += give_feedback(args.gateway, args.api_key, conv) == 200
    print(f"looked up the right order in {right}/{args.conversations} conversations; {rated} rated; "
          f"served by {conv['served_by']}")


if __name__ == "__main__":
    main()
