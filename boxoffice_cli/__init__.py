"""The ``boxoffice`` command: the process composition root above the services."""
