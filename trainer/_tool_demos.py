"""Tool-calling demonstrations for the tiny base model, so the embedded default answers `tools` requests.

Agents live on tool calls, and a model that never saw one fills a forced call's arguments with whitespace
until `max_tokens`. The base model therefore also learns the tool-call format of its chat template
(`_tokenizer`, Hermes style) from two small families, with the same deliberate imperfection as the
arithmetic demonstrations (a fraction copy the argument wrongly and then faithfully report what the tool
said, so the closed loop has something to fix):

    calc          user "Compute: 37+58*2"           -> calc(expression="37+58*2") -> "153" -> "Answer: 153"
    lookup_order  user "Where is order 48213?"      -> lookup_order(order_id="48213") -> "shipped" -> "Answer: shipped"

`calc` reuses the arithmetic task's demonstrations (`sandboxes.demonstration`, its miscopies included)
and turns their code block into a call. `lookup_order` is what `examples/support_bot.py` calls through a
plain OpenAI client; order ids 90000-99999 are never used here, so that example's eval suite measures
copying on ids the base model never saw. Half the demonstrations list both tools (in random order), so the
model learns to pick the tool its task names rather than always the same one.

Deliberately not here: tool choice between several plausible tools, parallel calls, tool errors.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from envs import demonstration
from sdk import Task

CALC_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an integer arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
LOOKUP_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up the status of an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
#: What `lookup_order` answers (the example's order database uses the same words).
ORDER_STATUSES = ("shipped", "delivered", "packed", "returned", "delayed", "cancelled")
#: How a user asks for an order (`{id}` is the order id).
LOOKUP_PROMPTS = ("Where is order {id}?", "Status of order {id}?", "Order {id}: where is it?")
#: Order ids the demonstrations draw from; 90000-99999 stay unseen.
DEMO_ORDER_IDS = (10000, 89999)


def order_status(order_id: str) -> str:
    """The status the demonstrations' order database gives `order_id` (a hash, so any id has one)."""
    return ORDER_STATUSES[int(hashlib.sha256(order_id.encode()).hexdigest(), 16) % len(ORDER_STATUSES)]


def _tools(own: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    if rng.random() < 0.5:
        return [own]
    both = [CALC_TOOL, LOOKUP_TOOL]
    rng.shuffle(both)
    return both


def _call(name: str, **arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def calc_demo(task: Task, rng: random.Random, *, miscopy_p: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools): the arithmetic demonstration of `task` with its code block turned into a `calc` call."""
    user, code, output, answer = demonstration(task, rng, miscopy_p=miscopy_p)
    expression = code["content"].removeprefix("```python\nprint(").removesuffix(")\n```")
    value = output["content"].removeprefix("Output: ")
    messages = [user, _call("calc", expression=expression),
                {"role": "tool", "tool_call_id": "call_0", "content": value}, answer]
    return messages, _tools(CALC_TOOL, rng)


def _miscopy_digit(s: str, rng: random.Random) -> str:
    i = rng.randrange(len(s))
    return s[:i] + rng.choice([d for d in "0123456789" if d != s[i]]) + s[i + 1:]


def lookup_demo(rng: random.Random, *, miscopy_p: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools): a user asks where an order is; the call copies its id (wrongly with `miscopy_p`)."""
    order_id = str(rng.randint(*DEMO_ORDER_IDS))
    called = _miscopy_digit(order_id, rng) if rng.random() < miscopy_p else order_id
    status = order_status(called)
    messages = [{"role": "user", "content": rng.choice(LOOKUP_PROMPTS).format(id=order_id)},
                _call("lookup_order", order_id=called),
                {"role": "tool", "tool_call_id": "call_0", "content": status},
                {"role": "assistant", "content": f"Answer: {status}"}]
    return messages, _tools(LOOKUP_TOOL, rng)
