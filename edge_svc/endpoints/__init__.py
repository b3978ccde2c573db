"""What each route of the edge does, in one module per area.

An area is a class built from :class:`~edge_svc.endpoints.common.EdgeDeps`
(and :class:`~edge_svc.endpoints.common.Callers` when it has fans' routes)
whose ``endpoints()`` names, for each of its routes of
:data:`edge_svc.routes.ROUTES`, the method that answers it. Every endpoint
first answers the route table's question, who may call it and acting as
whom, then parses, calls the mesh as the edge asserting that fan, and
answers the proto3 JSON of the RPC's response.

Shared request helpers live in :mod:`edge_svc.endpoints.common`, which
imports no area; :mod:`edge_svc.endpoints.sse` is the queue's stream of a
fan's place. To add an area: its routes in :mod:`edge_svc.routes`, a
module here with its class, and that class among the areas the composition
root (:func:`edge_svc.app.compose`) mounts; :func:`~edge_svc.endpoints.common.mount`
refuses a route without an endpoint and an endpoint without a route.
"""
