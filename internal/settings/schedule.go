package settings

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Schedule is a weekly window in a time zone. While it is open its
// categories add to the blocked set and its Paused applies. A window whose
// To is not after its From crosses midnight: it opens on a listed day at
// From and closes the next day at To.
type Schedule struct {
	Days              []string `json:"days"`
	From              string   `json:"from"`
	To                string   `json:"to"`
	TZ                string   `json:"tz"`
	BlockedCategories []uint16 `json:"blocked_categories,omitempty"`
	Paused            bool     `json:"paused,omitempty"`

	// Parsed forms, filled by Parse: weekdays as a bit set (1<<time.Weekday),
	// minutes after local midnight, the location.
	days     uint8
	from, to int
	loc      *time.Location
}

var dayNames = [...]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func parseSchedules(v json.RawMessage) ([]Schedule, error) {
	items, err := list("schedules", v)
	if err != nil {
		return nil, err
	}
	if len(items) > MaxSchedules {
		return nil, fieldErr("schedules", "more than %d schedules", MaxSchedules)
	}
	out := make([]Schedule, 0, len(items))
	for i, it := range items {
		s, err := parseSchedule(fmt.Sprintf("schedules[%d]", i), it)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSchedule(field string, v json.RawMessage) (Schedule, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
		return Schedule{}, fieldErr(field, "must be a JSON object")
	}
	for k := range raw {
		switch k {
		case "days", "from", "to", "tz", "blocked_categories", "paused":
		default:
			return Schedule{}, fieldErr(fmt.Sprintf("%s.%q", field, k), "unknown field")
		}
	}
	var s Schedule
	for _, k := range []string{"days", "from", "to", "tz"} {
		if _, ok := raw[k]; !ok {
			return Schedule{}, fieldErr(field+"."+k, "is required")
		}
	}
	days, err := list(field+".days", raw["days"])
	if err != nil {
		return Schedule{}, err
	}
	if len(days) == 0 {
		return Schedule{}, fieldErr(field+".days", "names no day")
	}
	for j, d := range days {
		f := fmt.Sprintf("%s.days[%d]", field, j)
		name, err := parseString(f, d)
		if err != nil {
			return Schedule{}, err
		}
		wd := slices.Index(dayNames[:], name)
		if wd < 0 {
			return Schedule{}, fieldErr(f, "%q is not one of mon, tue, wed, thu, fri, sat, sun", name)
		}
		s.days |= 1 << wd
	}
	for wd, name := range dayNames { // canonical order, no duplicates
		if s.days&(1<<wd) != 0 {
			s.Days = append(s.Days, name)
		}
	}
	if s.From, s.from, err = parseClock(field+".from", raw["from"], false); err != nil {
		return Schedule{}, err
	}
	if s.To, s.to, err = parseClock(field+".to", raw["to"], true); err != nil {
		return Schedule{}, err
	}
	if s.from == s.to {
		return Schedule{}, fieldErr(field, "from and to are equal; a whole day is from 00:00 to 24:00")
	}
	if s.TZ, err = parseString(field+".tz", raw["tz"]); err != nil {
		return Schedule{}, err
	}
	if s.TZ == "" || s.TZ == "Local" {
		return Schedule{}, fieldErr(field+".tz", "must name an IANA time zone such as Europe/Amsterdam or UTC")
	}
	if s.loc, err = time.LoadLocation(s.TZ); err != nil {
		return Schedule{}, fieldErr(field+".tz", "%q is not an IANA time zone", s.TZ)
	}
	if v, ok := raw["blocked_categories"]; ok {
		if s.BlockedCategories, err = parseCodes(field+".blocked_categories", v); err != nil {
			return Schedule{}, err
		}
	}
	if v, ok := raw["paused"]; ok {
		p, err := parseBool(field+".paused", v)
		if err != nil {
			return Schedule{}, err
		}
		s.Paused = *p
	}
	return s, nil
}

// parseClock parses "HH:MM" (24-hour); "24:00" is allowed as an end.
func parseClock(field string, v json.RawMessage, end bool) (string, int, error) {
	s, err := parseString(field, v)
	if err != nil {
		return "", 0, err
	}
	bad := fieldErr(field, "%q is not a time of day HH:MM from 00:00 to 23:59 (24:00 as an end)", s)
	if len(s) != 5 || s[2] != ':' {
		return "", 0, bad
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	switch {
	case err1 != nil || err2 != nil || s[0] == '+' || s[3] == '+' || s[0] == '-' || s[3] == '-':
		return "", 0, bad
	case h == 24 && m == 0 && end:
	case h < 0 || h > 23 || m < 0 || m > 59:
		return "", 0, bad
	}
	return s, h*60 + m, nil
}

// Open reports whether the window is open at t, judged by the wall clock of
// its time zone: on a day of a DST change a window follows local time, so
// 02:00–03:00 never opens on the spring-forward night and 01:00–02:00 lasts
// two hours on the fall-back night.
func (s *Schedule) Open(t time.Time) bool {
	local := t.In(s.loc)
	wd := local.Weekday()
	m := local.Hour()*60 + local.Minute()
	on := func(d time.Weekday) bool { return s.days&(1<<d) != 0 }
	if s.from < s.to {
		return on(wd) && m >= s.from && m < s.to
	}
	// Crosses midnight: the evening part today, the morning part of a
	// window that opened yesterday.
	return (on(wd) && m >= s.from) || (on((wd+6)%7) && m < s.to)
}
