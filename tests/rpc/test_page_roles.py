"""The read-only pages (``/console``, ``/transactions``) need the client role, like
the client routes, and a browser can give the token as HTTP Basic's password."""

from __future__ import annotations

import base64

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from raftlog.rpc.roles import PAGE_ROLES, Role
from raftlog.rpc.server import AuthPolicy, auth_middleware


def _basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()


async def test_pages_need_the_client_role_and_accept_basic_auth() -> None:
    assert PAGE_ROLES == {"/console": Role.CLIENT, "/transactions": Role.CLIENT}
    policy = AuthPolicy(client_token="c-secret", admin_token="a-secret", peer_token="p-secret")
    app = web.Application(middlewares=[auth_middleware(policy)])

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="the page")

    for path in PAGE_ROLES:
        app.router.add_get(path, page)
    async with TestClient(TestServer(app)) as client:
        for path in PAGE_ROLES:
            resp = await client.get(path)
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"].startswith("Basic ")
            assert "needs the client role" in await resp.text()
            for good in ("Bearer c-secret", "Bearer a-secret", _basic("c-secret")):
                resp = await client.get(path, headers={"Authorization": good})
                assert resp.status == 200, good
                assert await resp.text() == "the page"
            for bad in ("Bearer nope", _basic("nope"), "Basic !!!", _basic("")):
                resp = await client.get(path, headers={"Authorization": bad})
                assert resp.status == 401, bad
    # Basic is read on the pages only: a client route takes a bearer token
    assert policy.refusal("/v1/metadata", "Bearer c-secret") is None
    assert AuthPolicy().refusal("/console", "") is None  # no client token: open


async def test_a_node_without_tokens_serves_the_pages_open() -> None:
    app = web.Application(middlewares=[auth_middleware(AuthPolicy())])
    app.router.add_get("/console", lambda r: web.Response(text="ok"))
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/console")).status == 200
