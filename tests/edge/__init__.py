"""Tests of the edge: its HTTP API end to end, and the gRPC client the
service tests use to call as the edge (:mod:`tests.edge.asserting`)."""
