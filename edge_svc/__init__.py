"""The edge: HTTP/JSON and Server-Sent Events for browsers and apps, in front of the mesh."""
