-- Narrower events (docs/activity.md, "Stores"): id, the tie-breaker of one
-- t, becomes 4 bytes (a cycling sequence: two events of one millisecond are
-- never 2^31 ids apart), which with t's 8 and five 4-byte columns fills a
-- row's 32 bytes of data without padding; the subscriber index is (who, t)
-- (the id orders the few events of one who and one millisecond after the
-- index), and a BRIN index on t (a few pages a day: events arrive in
-- time order) serves the organisation-wide pages.
DROP VIEW activity_events_v;
ALTER SEQUENCE activity_event_id AS integer CYCLE;
ALTER TABLE activity_events ALTER COLUMN id TYPE integer;
DROP INDEX activity_events_who;
CREATE INDEX activity_events_who ON activity_events (who, t);
CREATE INDEX activity_events_t ON activity_events USING brin (t) WITH (pages_per_range = 16);
CREATE VIEW activity_events_v AS
SELECT e.t, e.id, to_timestamp(e.t / 1000.0) AS time, s.org, s.session_id, s.username, s.deviceid, s.location,
	w.client, w.policy, n.name AS qname, d.node, d.qtype, d.transport, d.verdict, d.action, d.reason, d.rcode,
	d.cached, d.sampled, x.categories, x.rule, e.lat AS latency_us
FROM activity_events e JOIN activity_whos w ON w.id = e.who JOIN activity_subs s ON s.id = w.sub
	JOIN activity_names n ON n.id = e.name JOIN activity_decs d ON d.id = e.dec JOIN activity_whats x ON x.id = e.what;
