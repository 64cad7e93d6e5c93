"""One module per API: its URL, authentication, request body and answer reader.

`api_for(options)` picks the run's. Adding what a request carries (image parts, tools) is one
function per API module: the content builders (`chat_messages`, `input_items`, `split_system`) and
the body builders are where each shape is made.
"""

from __future__ import annotations

from tokenrace.client.apis.base import Api
from tokenrace.client.apis.chat import ChatApi, CompletionsApi
from tokenrace.client.apis.embeddings import EmbeddingsApi
from tokenrace.client.apis.messages import MessagesApi
from tokenrace.client.apis.rerank import RerankApi, TeiRerankApi
from tokenrace.client.apis.responses import ResponsesApi
from tokenrace.client.request import API_NAMES, RequestOptions

_APIS: dict[str, Api] = {
    "chat": ChatApi(),
    "completions": CompletionsApi(),
    "responses": ResponsesApi(),
    "messages": MessagesApi(),
    "embeddings": EmbeddingsApi(),
    "rerank": RerankApi(),
}
_TEI = TeiRerankApi()


def api_for(options: RequestOptions) -> Api:
    if options.api not in _APIS:
        raise ValueError(f"unknown API {options.api!r}; known: {', '.join(API_NAMES)}")
    if options.api == "rerank" and options.rerank_format == "tei":
        return _TEI
    return _APIS[options.api]


__all__ = ["Api", "api_for"]
