"""The check-in service's adapters: its stores."""
