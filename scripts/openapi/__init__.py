"""The parts of the edge's OpenAPI document, which scripts/gen_openapi.py
puts together: what it is made from (:mod:`.contracts`), the messages'
schemas (:mod:`.schemas`), the shared components (:mod:`.components`) and
each route's operation (:mod:`.operations`)."""
