"""A bearer token of any odd shape is refused with 401 and the standard error body, never a 500,
on the REST API and on the MCP server alike (both verify through `api_key_resolve`)."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.services import parse_api_key
from tests.memory.test_mcp import assert_401, post_tools_list

HEX31 = "0123456789abcdef0123456789abcde"
SECRET = "x" * 43

# Each is `ak_<32 characters>_<secret>` or near it; none is a tenant id in 32 hex digits.
ODD_TOKENS = [
    pytest.param(f"ak_-{HEX31}_x", id="leading-minus"),
    pytest.param(f"ak_+{HEX31}_{SECRET}", id="leading-plus"),
    pytest.param(f"ak_0x{HEX31[:30]}_{SECRET}", id="0x-prefix"),
    pytest.param(f"ak_0X{HEX31[:30]}_{SECRET}", id="0X-prefix"),
    pytest.param(f"ak_{HEX31}\t_{SECRET}", id="trailing-tab"),
    pytest.param(f"ak_\x0b{HEX31}_{SECRET}", id="leading-vertical-tab"),
    pytest.param(f"ak_{HEX31}\x00_{SECRET}", id="nul-in-tenant"),
    pytest.param(f"ak_{HEX31}0_{SECRET}\x00", id="nul-in-secret"),
    pytest.param(f"ak_{HEX31[:-1]}-1_{SECRET}", id="minus-inside"),
    pytest.param(f"ak_{'٣' * 32}_{SECRET}", id="arabic-indic-digits"),
    pytest.param(f"ak_{'３' * 32}_{SECRET}", id="fullwidth-digits"),
    pytest.param(f"ak_{{{HEX31[:30]}}}_{SECRET}", id="braces"),
    pytest.param(f"ak_{HEX31}0_{'x' * 20_000}", id="very-long-secret"),
    pytest.param(f"ak_{'0' * 20_000}_{SECRET}", id="very-long-tenant"),
    pytest.param(f"ak_{HEX31}0_", id="empty-secret"),
    pytest.param(f"ak_{HEX31}0_sécret", id="non-ascii-secret"),
    pytest.param("ak__", id="empty-parts"),
]


@pytest.mark.parametrize("token", ODD_TOKENS)
def test_an_odd_token_does_not_parse(token):
    assert parse_api_key(token) is None


def test_a_well_formed_token_parses():
    assert parse_api_key(f"ak_{HEX31}0_{SECRET}") == (HEX31 + "0", f"ak_{HEX31}0_{SECRET}")


def as_received(token: str) -> str:
    """The header as a server sees it: the client's UTF-8 bytes, read as latin-1."""
    return token.encode("utf-8").decode("latin-1")


@pytest.mark.parametrize(
    "route", ["/api/v1/runs", "/api/v1/me", "/api/v1/approvals", "/api/v1/memory/subjects"]
)
@pytest.mark.parametrize("token", ODD_TOKENS)
def test_an_odd_token_gets_401_from_the_rest_api(db, route, token):
    response = Client(HTTP_AUTHORIZATION=f"Bearer {as_received(token)}").get(route)
    assert response.status_code == 401
    body = response.json()
    assert body["code"] == "unauthenticated" and body["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db(transaction=True)  # the server is another process
def test_an_odd_token_gets_401_from_mcp(console_url):
    # One server for the whole list (starting one per case would be slow). The HTTP client
    # refuses to send a NUL or a tab inside a header value, so those only reach the REST door
    # above (whose test client passes them); every other shape goes over the wire, UTF-8.
    sent = 0
    for param in ODD_TOKENS:
        (token,) = param.values
        if any(c in token for c in "\x00\t\x0b"):
            continue
        assert_401(post_tools_list(console_url, f"Bearer {token}".encode()))
        sent += 1
    assert sent >= 12
