# ruff: noqa: E501 (an HTML template: its lines are markup, not Python)
"""The console's page: one Jinja2 template, rendered on the server.

It refreshes itself with ``<meta http-equiv="refresh">`` (no JavaScript at all).
Jinja2's autoescaping is on (see :mod:`raftlog.console.app`): topic names, writer
ids and error texts come from clients and cannot inject markup. Rows carry
``data-*`` attributes (node id and state, writer and version) for tests and
scripts; the text is for people.
"""

from __future__ import annotations

PAGE = "console.html"

TEMPLATE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{ refresh_s }}">
<title>raftlog console</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em 2em; color: #1d232a; }
 h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
 table { border-collapse: collapse; margin-bottom: .6em; }
 th, td { padding: .2em .7em; border-bottom: 1px solid #dde2e7; text-align: left; }
 th { background: #f1f4f7; font-weight: 600; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
 .up { color: #146c2e; font-weight: 600; } .down { color: #b3261e; font-weight: 700; }
 .warn { color: #9a5b00; } .muted { color: #6b7480; }
 .banner { padding: .4em .8em; border-radius: 4px; display: inline-block; }
 .ok { background: #e3f4e8; } .bad { background: #fbe4e2; }
 details { margin: .2em 0 .8em; } summary { cursor: pointer; }
</style>
</head>
<body>
<h1>raftlog console</h1>
<div class="muted">{{ view.time }} · refreshes every {{ refresh_s }} s · read-only</div>
<p class="banner {{ 'ok' if view.healthy else 'bad' }}" id="health">
 {{ 'healthy' if view.healthy else 'not healthy' }} · controller leader
 {{ view.controller_leader if view.controller_leader >= 0 else 'none' }}</p>
{% if view.problems %}<ul id="problems">{% for p in view.problems %}<li class="warn">{{ p }}</li>{% endfor %}</ul>{% endif %}

<h2>Nodes</h2>
<table id="nodes">
<tr><th>node</th><th>address</th><th>state</th><th>last heartbeat</th><th>disk free</th></tr>
{% for n in view.nodes %}
<tr class="node" data-node="{{ n.node_id }}" data-state="{{ 'up' if n.up else 'down' }}">
 <td>{{ n.node_id }}</td><td>{{ n.address }}</td>
 <td class="{{ 'up' if n.up else 'down' }}">{{ 'up' if n.up else 'down' }}{% if n.error %} <span class="muted">({{ n.error }})</span>{% endif %}</td>
 <td class="n">{{ (n.last_heartbeat_ms|string) + ' ms ago' if n.last_heartbeat_ms >= 0 else '-' }}</td>
 <td class="n">{{ n.free_bytes|bytes if n.free_bytes >= 0 else '-' }}{% if n.degraded %} <span class="down">DEGRADED: {{ n.degraded_reason }}</span>{% endif %}</td>
</tr>
{% endfor %}
</table>

<h2>Topics</h2>
<table id="topics">
<tr><th>topic</th><th>partitions</th><th>offsets</th><th>bytes (all replicas)</th><th>offsets/s</th><th>bytes/s</th></tr>
{% for t in view.topics %}
<tr class="topic" data-topic="{{ t.name }}">
 <td>{{ t.name }}{% if t.internal %} <span class="muted">(internal)</span>{% endif %}</td>
 <td class="n">{{ t.partitions|length }}</td><td class="n">{{ '{:,}'.format(t.records) }}</td>
 <td class="n">{{ t.bytes|bytes }}</td>
 <td class="n">{{ '{:,.0f}'.format(t.records_per_s) if t.records_per_s is not none else '-' }}</td>
 <td class="n">{{ t.bytes_per_s|bytes if t.bytes_per_s is not none else '-' }}</td>
</tr>
{% endfor %}
</table>
{% for t in view.topics %}
<details{% if not t.internal %} open{% endif %}><summary>{{ t.name }}: partitions</summary>
<table class="partitions" data-topic="{{ t.name }}">
<tr><th>partition</th><th>leader</th><th>replicas</th><th>log start</th><th>high watermark</th><th>last stable offset</th><th>bytes</th><th>lagging replicas</th></tr>
{% for p in t.partitions %}
<tr><td class="n">{{ p.partition }}</td>
 <td class="{{ 'down' if p.leader < 0 or p.leader in p.down else '' }}">{{ p.leader if p.leader >= 0 else 'none' }}</td>
 <td>{% for r in p.replicas %}<span class="{{ 'down' if r in p.down else '' }}">{{ r }}</span>{{ ', ' if not loop.last }}{% endfor %}</td>
 <td class="n">{{ p.start_offset }}</td><td class="n">{{ p.high_watermark }}</td><td class="n">{{ p.last_stable_offset }}</td>
 <td class="n">{{ p.bytes|bytes }}</td>
 <td class="warn">{{ p.lagging|join('; ') if p.lagging else '-' }}</td></tr>
{% endfor %}
</table></details>
{% endfor %}

<h2>Open transactions</h2>
{% if view.open_transactions %}
<table id="open-transactions">
<tr><th>writer</th><th>version</th><th>state</th><th>participants</th><th>topics</th></tr>
{% for o in view.open_transactions %}
<tr><td>{{ o.writer }}</td><td class="n">{{ o.version }}</td><td>{{ o.state }}</td><td class="n">{{ o.participants }}</td><td>{{ o.topics|join(', ') }}</td></tr>
{% endfor %}
</table>
{% else %}<p class="muted" id="open-transactions">none</p>{% endif %}

<h2>Spark writers</h2>
<p class="muted">Each micro-batch of a streaming query (the writer is the query id, the version its batch id) as the transaction coordinator recorded it: one atomic commit.</p>
{% for w in view.writers %}
<table class="writer" data-writer="{{ w.writer }}">
<tr><th colspan="6">writer {{ w.writer }} · last committed version {{ w.last_committed }}</th></tr>
<tr><th>version</th><th>rows</th><th>partitions</th><th>topics</th><th>commit time</th><th>state</th></tr>
{% for b in w.batches %}
<tr class="batch" data-version="{{ b.version }}" data-state="{{ b.state }}">
 <td class="n">{{ b.version }}</td><td class="n">{{ '{:,}'.format(b.rows) if b.rows is not none else '-' }}</td>
 <td class="n">{{ b.partitions }}</td><td>{{ b.topics|join(', ') }}</td>
 <td>{{ b.time_ms|clock if b.time_ms else '-' }}</td><td>{{ b.state }}</td></tr>
{% endfor %}
</table>
{% else %}<p class="muted" id="no-writers">no writer has committed through the coordinator yet</p>
{% endfor %}
</body>
</html>
"""
