"""The aiohttp application key under which the Gateway object lives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from tokenrace.gateway.app import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")
