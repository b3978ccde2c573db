-- A section's live counters: the sums of its stripes.
CREATE OR REPLACE VIEW section_totals AS
SELECT sc.event_id, sc.section_id, sc.kind, sc.capacity, sc.overbook_limit,
       COALESCE(sum(st.sold), 0)::integer AS sold,
       COALESCE(sum(st.held), 0)::integer AS held
  FROM sections sc
  LEFT JOIN section_stripes st ON st.event_id = sc.event_id AND st.section_id = sc.section_id
 GROUP BY sc.event_id, sc.section_id;
