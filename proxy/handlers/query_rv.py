"""The resourceVersion a client's query carries, read for a union (list or watch) in one place:
decoded into the vector the union starts from, or refused as kube-apiserver refuses an RV it
cannot serve (`410 Expired`, so the client relists). A forwarded request translates its RV to
the one partition's native RV itself (`proxy.handlers.forward`); the encodings are
`routing.rv`'s, the shared epoch table `proxy.rv_epochs`'."""

from __future__ import annotations

from proxy import answers
from proxy.messages import Answer
from proxy.rv_epochs import ResourceVersions
from routing import rv as rvcodec


class RefusedRV(Exception):
    """The client's resourceVersion cannot be served; `answer` is the Status to answer with."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


def too_old(client_rv: str, why: object) -> Answer:
    """kube-apiserver's answer to an RV it no longer (or never) holds: 410 Expired."""
    return answers.expired_answer(f"too old resource version: {client_rv} ({why})")


async def union_start(rv: ResourceVersions, codec: rvcodec.RVCodec, client_rv: str) -> tuple[int, ...] | None:
    """The vector a union starts from (`ResourceVersions.start_vector`): None for no position
    ("", "0"). Raises RefusedRV (410 Expired) for an RV no held epoch decodes."""
    try:
        return await rv.start_vector(codec, client_rv)
    except rvcodec.RVError as exc:
        raise RefusedRV(too_old(client_rv, exc)) from None
