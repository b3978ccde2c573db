"""The check-in service: tickets admitted once at the door (see :mod:`checkin_svc.app`)."""
