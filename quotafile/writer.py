"""Writing a quota file: ``QuotaState`` to YAML that reads back to the same numbers (no Django)."""

from __future__ import annotations

from typing import Any

import yaml

from quotafile import groups as _groups
from quotafile.common import (
    CLUSTER_WIDE,
    _Flow,
    human_value,
)
from quotafile.state import (
    API_VERSION,
    KEY_ORDER,
    KIND,
    QuotaState,
    broker_order,
    entity_dict,
    entity_order,
)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter when PyYAML has it
    pass


_Dumper.add_representer(_Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items(),
                                                                    flow_style=True))
_Dumper.add_representer(dict, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items()))


def _config_value(text: str) -> int | str:
    try:
        number = int(text)
    except ValueError:
        return text
    return number if str(number) == text else text


def write(state: QuotaState) -> str:
    """The state as a quota file, in a stable order (precedence for quotas, broker ids, names)."""
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "cluster": state.cluster}
    if state.quotas is not None:
        items = []
        for ref in sorted(state.quotas, key=entity_order):
            item: dict[str, Any] = {"entity": _Flow(entity_dict(ref))}
            for key in sorted(state.quotas[ref], key=_key_rank):
                value = human_value(key, state.quotas[ref][key])
                if (ref, key) in state.cluster_wide:
                    item[key] = _Flow({"value": value, "budgetScope": CLUSTER_WIDE})
                else:
                    item[key] = value
            items.append(item)
        doc["quotas"] = items
    if state.broker_configs is not None:
        doc["brokerConfigs"] = {
            b: {k: _config_value(v) for k, v in sorted(state.broker_configs[b].items())}
            for b in sorted(state.broker_configs, key=broker_order)
        }
    if state.topic_configs is not None:
        doc["topicConfigs"] = {
            t: {k: _config_value(v) for k, v in sorted(state.topic_configs[t].items())}
            for t in sorted(state.topic_configs)
        }
    if state.client_metrics is not None:
        doc["clientMetrics"] = [
            {
                "name": name,
                "metrics": [m for m in sub.metrics.split(",") if m],
                "intervalMs": sub.interval_ms,
                "match": [m for m in sub.match.split(",") if m],
            }
            for name, sub in sorted(state.client_metrics.items())
        ]
    if state.groups is not None:
        doc["groups"] = [_groups.group_doc(state.groups[name]) for name in sorted(state.groups)]
    if state.exempt is not None:
        doc["exemptPrincipals"] = _groups.exempt_doc(state.exempt)
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def _key_rank(key: str) -> int:
    return KEY_ORDER.index(key) if key in KEY_ORDER else len(KEY_ORDER)
