-- One UTC day of activity. Every repeating string is kept once in a
-- dictionary table and referred to by a small integer; events hold only
-- those integers (docs/activity.md, "Stores").
CREATE TABLE subs (
	id         INTEGER PRIMARY KEY,
	org        TEXT NOT NULL,
	session_id TEXT NOT NULL,
	username   TEXT NOT NULL,
	deviceid   TEXT NOT NULL,
	location   TEXT NOT NULL,
	UNIQUE (org, session_id, username, deviceid, location)
);
CREATE TABLE whos (
	id     INTEGER PRIMARY KEY,
	sub    INTEGER NOT NULL REFERENCES subs (id),
	client TEXT NOT NULL,
	policy TEXT NOT NULL,
	UNIQUE (sub, client, policy)
);
CREATE TABLE names (
	id   INTEGER PRIMARY KEY,
	name TEXT NOT NULL UNIQUE
);
CREATE TABLE decs (
	id        INTEGER PRIMARY KEY,
	node      TEXT NOT NULL,
	qtype     INTEGER NOT NULL,
	transport TEXT NOT NULL,
	verdict   TEXT NOT NULL,
	action    TEXT NOT NULL,
	reason    TEXT NOT NULL,
	rcode     INTEGER NOT NULL,
	cached    TEXT NOT NULL,
	sampled   INTEGER NOT NULL,
	UNIQUE (node, qtype, transport, verdict, action, reason, rcode, cached, sampled)
);
CREATE TABLE whats (
	id         INTEGER PRIMARY KEY,
	categories TEXT NOT NULL,
	rule       TEXT NOT NULL,
	UNIQUE (categories, rule)
);
CREATE TABLE reasons (
	id     INTEGER PRIMARY KEY,
	reason TEXT NOT NULL UNIQUE
);
-- id is the event's time as milliseconds within the day, shifted left by
-- 15 bits, plus a counter for events of the same millisecond: the table is
-- kept in time order by its own key, and needs no time column.
CREATE TABLE events (
	id   INTEGER PRIMARY KEY,
	who  INTEGER NOT NULL,
	name INTEGER NOT NULL,
	dec  INTEGER NOT NULL,
	what INTEGER NOT NULL,
	lat  INTEGER NOT NULL
);
-- One subscriber's events newest first (the index holds the rowid too).
CREATE INDEX events_who ON events (who);
-- Counts per organisation, dimension (1 category, 2 domain, 3 subscriber,
-- 4 reason), hour of the day (0…23; 24 is the whole day) and key
-- (category code, names.id, subs.id, reasons.id).
CREATE TABLE roll (
	org TEXT    NOT NULL,
	dim INTEGER NOT NULL,
	h   INTEGER NOT NULL,
	key INTEGER NOT NULL,
	n   INTEGER NOT NULL,
	b   INTEGER NOT NULL,
	PRIMARY KEY (org, dim, h, key)
) WITHOUT ROWID;
-- The batches stored in this file: a batch arriving again is skipped.
CREATE TABLE applied (
	node TEXT    NOT NULL,
	boot INTEGER NOT NULL,
	seq  INTEGER NOT NULL,
	PRIMARY KEY (node, boot, seq)
) WITHOUT ROWID;
-- The file's day (YYYY-MM-DD), for the view below.
CREATE TABLE meta (day TEXT NOT NULL);
-- For reading the file by hand (sqlite3 2026-11-28.db 'SELECT * FROM events_v LIMIT 10').
CREATE VIEW events_v AS
SELECT e.id, strftime('%Y-%m-%dT%H:%M:%fZ', (e.id >> 15) / 1000.0 + unixepoch(substr(file, 1, 10)), 'unixepoch') AS time,
	s.org, s.session_id, s.username, s.deviceid, s.location, w.client, w.policy, n.name AS qname,
	d.node, d.qtype, d.transport, d.verdict, d.action, d.reason, d.rcode, d.cached, d.sampled,
	x.categories, x.rule, e.lat AS latency_us
FROM events e JOIN whos w ON w.id = e.who JOIN subs s ON s.id = w.sub JOIN names n ON n.id = e.name
	JOIN decs d ON d.id = e.dec JOIN whats x ON x.id = e.what, (SELECT day AS file FROM meta);
