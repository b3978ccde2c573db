"""The authorization table: every RPC of every contract has an answer, and
the answers mean what they say."""

from __future__ import annotations

import pytest

from boxoffice import access
from boxoffice.caller import NOBODY, Caller, acting_as, current
from gen.boxoffice.booking.v1 import booking_admin_service_pb2, booking_service_pb2
from gen.boxoffice.checkin.v1 import checkin_service_pb2
from gen.boxoffice.mail.v1 import mail_admin_service_pb2
from gen.boxoffice.payment.v1 import payment_service_pb2
from gen.boxoffice.queue.v1 import queue_admin_service_pb2, queue_service_pb2


def contract_methods() -> set[str]:
    methods: set[str] = set()
    for module in (
        queue_service_pb2,
        queue_admin_service_pb2,
        booking_service_pb2,
        booking_admin_service_pb2,
        payment_service_pb2,
        mail_admin_service_pb2,
        checkin_service_pb2,
    ):
        for service in module.DESCRIPTOR.services_by_name.values():
            methods |= {f"/{service.full_name}/{m.name}" for m in service.methods}
    return methods


def test_every_rpc_of_the_contracts_is_in_the_table() -> None:
    missing = contract_methods() - set(access.POLICY)
    assert not missing, f"RPCs nobody decided who may call: {sorted(missing)}"


def test_the_table_names_no_rpc_the_contracts_lack() -> None:
    extra = {m for m in access.POLICY if m.startswith("/boxoffice.")} - contract_methods()
    assert not extra, sorted(extra)


def test_every_role_in_the_table_is_a_role_of_the_mesh() -> None:
    for method, roles in access.POLICY.items():
        assert roles <= {*access.ROLES, access.ANYONE}, method
        assert roles, method


def test_an_unknown_method_answers_nobody() -> None:
    assert not access.allowed("/boxoffice.booking.v1.BookingService/DropAllSeats", access.OPERATOR)


def test_only_payment_confirms_a_hold_and_only_operators_refund() -> None:
    confirm = "/boxoffice.booking.v1.BookingService/ConfirmHold"
    refund = "/boxoffice.payment.v1.PaymentService/RefundPayment"
    assert [r for r in access.ROLES if access.allowed(confirm, r)] == [access.PAYMENT]
    assert [r for r in access.ROLES if access.allowed(refund, r)] == [access.OPERATOR]
    assert not access.allowed(confirm, None)


def test_the_door_answers_gate_devices_and_fans_through_the_edge_only() -> None:
    door = "/boxoffice.checkin.v1.CheckInService/"
    for method in ("Scan", "ExportCheckInList", "UploadScans", "GetTicketRotation"):
        # The device's key (or the fan) is checked by the service; the mesh
        # identity that passes them on is the edge's, never an operator's.
        assert [r for r in access.ROLES if access.allowed(door + method, r)] == [access.EDGE], method
    assert [r for r in access.ROLES if access.allowed(door + "GetCheckInKeys", r)] == [access.EDGE, access.OPERATOR]
    # The checkin role serves; it calls nothing of the mesh.
    assert not [m for m, roles in access.POLICY.items() if access.CHECKIN in roles and "Reflection" not in m]


def test_health_answers_a_probe_without_a_certificate() -> None:
    assert access.allowed("/grpc.health.v1.Health/Check", None)
    assert not access.allowed("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", None)


@pytest.mark.parametrize(
    ("spiffe", "role"),
    [
        ("spiffe://boxoffice.local/ns/prod/sa/edge", "edge"),
        ("spiffe://boxoffice.local/ns/prod/sa/payment", "payment"),
        ("spiffe://other.domain/ns/prod/sa/edge", None),
        ("spiffe://boxoffice.local/ns/prod/sa/root", None),
        ("spiffe://boxoffice.local/ns/prod/sa/edge/extra", None),
        ("spiffe://boxoffice.local/ns//sa/edge", None),
        ("https://boxoffice.local/ns/prod/sa/edge", None),
    ],
)
def test_role_of_reads_only_this_trust_domain(spiffe: str, role: str | None) -> None:
    assert access.role_of(spiffe, "boxoffice.local") == role


def test_spiffe_id_round_trips() -> None:
    for role in access.ROLES:
        assert access.role_of(access.spiffe_id("d.example", "ns1", role), "d.example") == role


def test_the_caller_is_nobody_outside_a_call() -> None:
    assert current() is NOBODY
    edge = Caller(identity=access.spiffe_id("d", "n", "edge"), role="edge", customer_id="fan-1")
    with acting_as(edge):
        assert current() == edge and current().is_edge
    assert current() is NOBODY and not NOBODY.authenticated


def test_the_admin_services_answer_operators_only() -> None:
    admin = [
        m
        for m in contract_methods()
        if m.startswith(
            (
                "/boxoffice.queue.v1.QueueAdminService/",
                "/boxoffice.booking.v1.BookingAdminService/",
                "/boxoffice.checkin.v1.CheckInAdminService/",
            )
        )
    ]
    assert len(admin) == 17
    for method in admin:
        assert [r for r in access.ROLES if access.allowed(method, r)] == [access.OPERATOR], method
        assert not access.allowed(method, None), method
