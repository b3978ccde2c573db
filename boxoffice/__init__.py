"""Runtime shared by the boxoffice services: configuration, errors, gRPC
serving, storage, tokens, metrics and the command line."""
