"""`{% kept key %}...{% endkept %}`: a fragment rendered once per key in this process, then
reused. Registered as a template builtin (config/settings.py).

For a fragment that depends on nothing but what its key names, shown again and again: the
runs lists' row cells are kept under a key of every value they show (agents/presenters/
pages.py `dress_runs`, agents/console/selectors.py), so a run changed by any path gets a new
key; without it every list of 50 rows went through the template engine for each row on
every request. What changes with time (`|ago`, a live clock) or outside the key (a username)
stays outside the block. A false key (None, "") renders afresh and keeps nothing.

Kept per place in the templates and key, at most SIZE fragments a process (past that, all
are dropped and made again). Nothing is shared between processes: each keeps what it serves.
"""

from __future__ import annotations

import itertools
from typing import Any

from django import template
from django.template.base import FilterExpression, NodeList, Parser, Token
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

SIZE = 10_000
_kept: dict[tuple[Any, ...], SafeString] = {}
# Each {% kept %} of each compiled template is a place of its own (templates are compiled once
# and kept by Django's cached loader; a template compiled again gets new places).
_places = itertools.count()


class KeptNode(template.Node):
    def __init__(self, key: FilterExpression, nodelist: NodeList) -> None:
        self.key = key
        self.nodelist = nodelist
        self.place = next(_places)

    def render(self, context: template.Context) -> str:
        key = self.key.resolve(context)
        if not key:
            return self.nodelist.render(context)
        where = (self.place, key)
        found = _kept.get(where)
        if found is None:
            if len(_kept) >= SIZE:
                _kept.clear()
            found = _kept[where] = mark_safe(self.nodelist.render(context))
        return found


@register.tag
def kept(parser: Parser, token: Token) -> KeptNode:
    """`{% kept run.row_key %}...{% endkept %}`."""
    bits = token.split_contents()
    if len(bits) != 2:
        raise template.TemplateSyntaxError("{% kept %} takes one key: {% kept row.key %}")
    nodelist = parser.parse(("endkept",))
    parser.delete_first_token()
    return KeptNode(parser.compile_filter(bits[1]), nodelist)
