# syntax=docker/dockerfile:1
# One image for every boxoffice process; the command picks the part:
#   docker run IMAGE queue-svc | admitter | booking-svc | sweeper | relay | payment-svc | issuer | edge | migrate
# It holds what a cluster needs: no embedded stores (a cluster names its
# Postgres and Redis), the Kubernetes client for leader election.
# Every dependency ships as a manylinux wheel for linux/amd64, so the build
# needs no compiler.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/boxoffice
WORKDIR /src
COPY pyproject.toml README.md ./
COPY boxoffice ./boxoffice
COPY boxoffice_cli ./boxoffice_cli
COPY queue_svc ./queue_svc
COPY booking_svc ./booking_svc
COPY payment_svc ./payment_svc
COPY checkin_svc ./checkin_svc
COPY edge_svc ./edge_svc
COPY mail_svc ./mail_svc
COPY gen ./gen
RUN /opt/boxoffice/bin/pip install ".[kubernetes]" \
 && /opt/boxoffice/bin/python -m compileall -q /opt/boxoffice/lib

FROM python:3.11-slim
RUN groupadd --system --gid 10001 boxoffice \
 && useradd --system --uid 10001 --gid boxoffice --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin boxoffice
COPY --from=build /opt/boxoffice /opt/boxoffice
# Bytecode was compiled at build time: the root filesystem can be read-only.
ENV PATH=/opt/boxoffice/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    BOXOFFICE_GRPC_HOST=0.0.0.0 \
    BOXOFFICE_EDGE_HOST=0.0.0.0 \
    BOXOFFICE_DATA_DIR=/tmp/boxoffice
WORKDIR /tmp
USER 10001:10001
EXPOSE 50051 8080 9464
ENTRYPOINT ["boxoffice"]
CMD ["up"]
