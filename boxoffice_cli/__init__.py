"""The ``boxoffice`` command: the process composition root above the services."""

import os

# gRPC's C core writes its own log lines to stderr, not as JSON; a process of
# the mesh logs every failure itself (as JSON), so the core is quiet unless an
# operator asks (GRPC_VERBOSITY=ERROR, INFO or DEBUG). Set before gRPC loads.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
