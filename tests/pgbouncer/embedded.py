"""An embedded Postgres for scripts/pgbouncer_test.sh when the suite is
given none: prints its URL, runs until stopped (SIGTERM)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from boxoffice.embedded import EmbeddedPostgres


def main() -> None:
    server = EmbeddedPostgres(Path(sys.argv[1]))
    print(server.start(), flush=True)
    try:
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        server.stop()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    main()
