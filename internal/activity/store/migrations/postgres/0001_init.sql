-- Activity in PostgreSQL: the dictionaries are shared by every day; events,
-- their counts (roll) and the batches applied are partitioned by UTC day
-- and dropped a whole day at a time (docs/activity.md, "Stores").
CREATE TABLE activity_subs (
	id         serial PRIMARY KEY,
	org        text NOT NULL,
	session_id text NOT NULL,
	username   text NOT NULL,
	deviceid   text NOT NULL,
	location   text NOT NULL,
	UNIQUE (org, session_id, username, deviceid, location)
);
CREATE INDEX activity_subs_org ON activity_subs (org);
CREATE TABLE activity_whos (
	id     serial PRIMARY KEY,
	sub    integer NOT NULL REFERENCES activity_subs (id),
	client text NOT NULL,
	policy text NOT NULL,
	UNIQUE (sub, client, policy)
);
CREATE TABLE activity_names (
	id   serial PRIMARY KEY,
	name text NOT NULL UNIQUE
);
CREATE TABLE activity_decs (
	id        serial PRIMARY KEY,
	node      text NOT NULL,
	qtype     integer NOT NULL,
	transport text NOT NULL,
	verdict   text NOT NULL,
	action    text NOT NULL,
	reason    text NOT NULL,
	rcode     integer NOT NULL,
	cached    text NOT NULL,
	sampled   boolean NOT NULL,
	UNIQUE (node, qtype, transport, verdict, action, reason, rcode, cached, sampled)
);
CREATE TABLE activity_whats (
	id         serial PRIMARY KEY,
	categories text NOT NULL,
	rule       text NOT NULL,
	UNIQUE (categories, rule)
);
CREATE TABLE activity_reasons (
	id     serial PRIMARY KEY,
	reason text NOT NULL UNIQUE
);
CREATE SEQUENCE activity_event_id CACHE 1000;
-- t: milliseconds since the Unix epoch; id: the tie-breaker of one t.
CREATE TABLE activity_events (
	t    bigint  NOT NULL,
	id   bigint  NOT NULL DEFAULT nextval('activity_event_id'),
	who  integer NOT NULL,
	name integer NOT NULL,
	dec  integer NOT NULL,
	what integer NOT NULL,
	lat  integer NOT NULL
) PARTITION BY RANGE (t);
CREATE INDEX activity_events_who ON activity_events (who, t, id);
-- day: days since the Unix epoch; h: hour of the day, 24 the whole day.
CREATE TABLE activity_roll (
	day integer  NOT NULL,
	org text     NOT NULL,
	dim smallint NOT NULL,
	h   smallint NOT NULL,
	key integer  NOT NULL,
	n   bigint   NOT NULL,
	b   bigint   NOT NULL,
	PRIMARY KEY (day, org, dim, h, key)
) PARTITION BY RANGE (day);
CREATE TABLE activity_applied (
	day  integer NOT NULL,
	node text    NOT NULL,
	boot bigint  NOT NULL,
	seq  bigint  NOT NULL,
	PRIMARY KEY (day, node, boot, seq)
) PARTITION BY RANGE (day);
CREATE VIEW activity_events_v AS
SELECT e.t, e.id, to_timestamp(e.t / 1000.0) AS time, s.org, s.session_id, s.username, s.deviceid, s.location,
	w.client, w.policy, n.name AS qname, d.node, d.qtype, d.transport, d.verdict, d.action, d.reason, d.rcode,
	d.cached, d.sampled, x.categories, x.rule, e.lat AS latency_us
FROM activity_events e JOIN activity_whos w ON w.id = e.who JOIN activity_subs s ON s.id = w.sub
	JOIN activity_names n ON n.id = e.name JOIN activity_decs d ON d.id = e.dec JOIN activity_whats x ON x.id = e.what;
