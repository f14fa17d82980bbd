package rpz

import "slices"

// Reconfigure returns a new Set for zones (a changed `rpz:` list, read
// again on a reload), loaded as New loads: every zone's file read once
// before it returns. It shares s's metrics, since a Registerer takes each
// series once. s is left as it is and keeps serving until the caller swaps
// the new Set in, stops s's Run, runs the new one and calls Retire: an
// invalid list returns an error and changes nothing.
func (s *Set) Reconfigure(zones []ZoneConfig) (*Set, error) {
	cfg := s.cfg
	cfg.Zones = zones
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return buildSet(cfg, s.m), nil
}

// Retire drops the series of s's zones that next (its Reconfigure) no
// longer has, once next is in force.
func (s *Set) Retire(next *Set) {
	for _, old := range s.cfg.Zones {
		if !slices.ContainsFunc(next.cfg.Zones, func(z ZoneConfig) bool { return z.Name == old.Name }) {
			s.m.drop(old.Name)
		}
	}
}

// drop deletes one zone's series.
func (m *metrics) drop(name string) {
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.triggers, m.serial, m.loadedAt, m.failing, m.failures} {
		v.DeleteLabelValues(name)
	}
}
