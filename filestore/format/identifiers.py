"""One validation for every name that becomes a path or a Kafka topic.

Databases and tables become directories (``<db>.db/<table>``) and the topic
``dts.<db>.<table>``; partition columns become ``<col>=<value>`` directories;
bucket-key columns name the hash columns of both tiers; tags become files
``tag/tag-<name>``, consumers ``consumer/consumer-<id>``; ``log.topic`` is a topic. A name outside its rule could
escape the warehouse (``../``), break a path, or name a topic Kafka refuses,
so it is refused where it enters, with the rule in the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from filestore.errors import InvalidIdentifier


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    text: str
    max_length: int


# 100 characters each keep dts.<db>.<table> under Kafka's 249-character topic limit
_NAME = Rule(re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*"), "[A-Za-z0-9][A-Za-z0-9_-]*", 100)
_COLUMN = Rule(re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*"), "[A-Za-z0-9_][A-Za-z0-9_-]*", 100)
_TAG = Rule(re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*"), "[A-Za-z0-9][A-Za-z0-9_.-]*", 200)
# Kafka's legal topic characters (org.apache.kafka.common.internals.Topic)
_TOPIC = Rule(re.compile(r"[A-Za-z0-9._-]+"), "[A-Za-z0-9._-]+", 249)

RULES: dict[str, Rule] = {
    "database": _NAME,
    "table": _NAME,
    "partition column": _COLUMN,
    "bucket-key column": _COLUMN,
    "tag": _TAG,
    "consumer": _TAG,
    "topic": _TOPIC,
}


def check_identifier(kind: str, name: object) -> str:
    """Return ``name`` if it follows the rule of ``kind``; else InvalidIdentifier naming both."""
    rule = RULES[kind]
    if not isinstance(name, str) or not name:
        raise InvalidIdentifier(f"{kind} name {name!r} is empty or not a string; use {rule.text}")
    if not rule.pattern.fullmatch(name) or len(name) > rule.max_length:
        raise InvalidIdentifier(
            f"{kind} name {name!r} is not valid: it becomes a path or Kafka topic, so it "
            f"must match {rule.text} and be at most {rule.max_length} characters"
        )
    if kind == "tag" and name.isdigit():
        raise InvalidIdentifier(f"tag name {name!r} is all digits: it would read as a snapshot id")
    if kind == "topic" and name in (".", ".."):
        raise InvalidIdentifier(f"topic name {name!r} is not allowed by Kafka")
    return name
