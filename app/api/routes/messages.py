"""Messages: offer (create, update, ignore), batch offer, read and delete. The single offer,
the update and the batch are hot: served by a LeanRoute (app/api/lean.py)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response, status

from app.api.deps import allowed_queues, lists_of, service_of
from app.api.lean import lean_route
from app.api.openapi import TRACE_HEADERS, problem_responses
from app.api.rendering import (
    batch_response,
    message_list_response,
    message_response,
    offer_response,
)
from app.api.schemas.fields import Cursor, PageLimit, QueueName
from app.api.schemas.messages import (
    BatchRequest,
    BatchResponse,
    GroupFilter,
    KeyPrefix,
    MessageKey,
    MessageListResponse,
    MessageResponse,
    OfferResponse,
    PutMessage,
    StateFilter,
    UpdateMessage,
)
from app.domain.messages import OfferRequest, Outcome
from app.domain.pages import DEFAULT_PAGE, ListState
from app.domain.trace import trace_of_headers

router = APIRouter(prefix="/v1/queues/{queue}", tags=["messages"])

_WRITE_ERRORS = problem_responses(413, 422, 503)


@lean_route(
    router,
    "PUT",
    "/messages/{key:path}",
    response_model=OfferResponse,
    status_code=status.HTTP_201_CREATED,
    summary="Offer a message: create it, or update or ignore it when the key exists",
    responses={200: {"model": OfferResponse, "description": "Updated or ignored"}, **_WRITE_ERRORS},
    operation_id="offerMessage",
    openapi_extra=TRACE_HEADERS,
)
async def put_message(
    queue: QueueName, key: MessageKey, body: PutMessage, request: Request
) -> Response:
    result = await service_of(request).offer(
        queue,
        OfferRequest(
            key=key,
            payload=body.payload,
            when=body.when(),
            if_exists=body.if_exists,
            priority=body.priority,
            group=body.group,
            trace=trace_of_headers(request.scope["headers"]),
        ),
        allowed_queues(request),
    )
    created = result.outcome is Outcome.CREATED
    return offer_response(result, status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@lean_route(
    router,
    "POST",
    "/messages/{key:path}",
    response_model=OfferResponse,
    summary="Update an existing message (never creates one)",
    responses=problem_responses(404, 413, 422, 503),
    operation_id="updateMessage",
    openapi_extra=TRACE_HEADERS,
)
async def update_message(
    queue: QueueName, key: MessageKey, body: UpdateMessage, request: Request
) -> Response:
    result = await service_of(request).update(
        queue,
        OfferRequest(
            key=key,
            payload=body.payload,
            when=body.when(),
            priority=body.priority,
            group=body.group,
            trace=trace_of_headers(request.scope["headers"]),
        ),
        allowed_queues(request),
    )
    return offer_response(result)


@router.post(
    "/messages",
    status_code=status.HTTP_201_CREATED,
    response_model=OfferResponse,
    summary="Create a message under a generated key",
    responses={201: {"headers": {"Location": {"schema": {"type": "string"}}}}, **_WRITE_ERRORS},
    operation_id="createMessage",
    openapi_extra=TRACE_HEADERS,
)
async def create_message(queue: QueueName, body: UpdateMessage, request: Request) -> Response:
    result = await service_of(request).offer_new(
        queue,
        OfferRequest(
            key="",
            payload=body.payload,
            when=body.when(),
            priority=body.priority,
            group=body.group,
            trace=trace_of_headers(request.scope["headers"]),
        ),
    )
    answer = offer_response(result, status.HTTP_201_CREATED)
    answer.headers["Location"] = f"/v1/queues/{queue}/messages/{quote(result.key)}"
    return answer


@router.get(
    "/messages",
    response_model=MessageListResponse,
    summary="List messages: by due time, or by key with a key prefix; a page at a time",
    responses=problem_responses(404, 422, 503),
    operation_id="listMessages",
)
async def list_messages(
    queue: QueueName,
    request: Request,
    state: StateFilter = ListState.ALL,
    prefix: KeyPrefix = None,
    group: GroupFilter = None,
    limit: PageLimit = DEFAULT_PAGE,
    cursor: Cursor = None,
) -> Response:
    """Without `prefix`, in due-time order, then by id; with it, in key order. Paging
    while offers and polls go on lists no message twice in one walk, and skips none
    that stayed in place (a message offered or polled meanwhile has moved, and is
    left to a new walk). A page stops early rather than pass the poll's byte bound."""
    page = await lists_of(request).messages(
        queue, state=state, prefix=prefix, group=group, cursor=cursor, limit=limit
    )
    return message_list_response(page.messages, page.next)


@router.get(
    "/messages/{key:path}",
    response_model=MessageResponse,
    summary="Read a message",
    responses=problem_responses(404, 422, 503),
    operation_id="getMessage",
)
async def get_message(queue: QueueName, key: MessageKey, request: Request) -> Response:
    service = service_of(request)
    message = await service.get(queue, key)
    return message_response(message, service.state_of(message))


@router.delete(
    "/messages/{key:path}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a message, leased or not",
    responses=problem_responses(404, 422, 503),
    operation_id="deleteMessage",
)
async def delete_message(queue: QueueName, key: MessageKey, request: Request) -> Response:
    await service_of(request).delete(queue, key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@lean_route(
    router,
    "POST",
    "/batch",
    response_model=BatchResponse,
    summary="Offer up to 1000 messages; a repeated key behaves as if offered in sequence",
    responses=_WRITE_ERRORS,
    operation_id="offerBatch",
    openapi_extra=TRACE_HEADERS,
)
async def offer_batch(queue: QueueName, body: BatchRequest, request: Request) -> Response:
    trace = trace_of_headers(request.scope["headers"])  # the batch's, on every item
    requests = [
        OfferRequest(
            key=item.key,
            payload=item.payload,
            when=item.when(),
            if_exists=item.if_exists or body.if_exists,
            priority=item.priority,
            group=item.group,
            trace=trace,
        )
        for item in body.messages
    ]
    outcomes = await service_of(request).offer_many(queue, requests, allowed_queues(request))
    return batch_response([request.key for request in requests], outcomes)
